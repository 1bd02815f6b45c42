package virtualconsul

import (
	"context"

	"github.com/meshdns/meshdns/plugin/virtualconsul/internal/tablefix"
	"github.com/meshdns/meshdns/plugin/virtualconsul/source"
)

// The keys of the tests' tables, and a table file writer.
const (
	webKey = tablefix.WebKey
	apiKey = tablefix.APIKey
)

var writeTable = tablefix.WriteTable

// namedSource is a source that only has a name, for what lists it.
type namedSource string

func (s namedSource) Name() string                                      { return string(s) }
func (s namedSource) Key() string                                       { return string(s) }
func (s namedSource) Run(ctx context.Context, report func(source.Sync)) { <-ctx.Done() }
