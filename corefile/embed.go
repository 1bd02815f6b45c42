// Package corefile holds meshdns's example Corefiles and their demo data.
// Corefile is the embedded default that `meshdns` serves when it is started
// with no -conf and no ./Corefile; its data paths are relative to this
// directory.
package corefile

import "embed"

// Files is this directory: the default Corefile, the other example
// Corefiles and the demo data they read.
//
//go:embed Corefile *.Corefile data
var Files embed.FS
