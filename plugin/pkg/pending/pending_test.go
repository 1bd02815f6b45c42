package pending

import (
	"slices"
	"testing"
)

func TestFailedStopsOnlyWhatStartedSinceBegin(t *testing.T) {
	var stopped []string
	stop := func(name string) func() { return func() { stopped = append(stopped, name) } }
	Started(stop("first")) // the first start: live once a reload begins
	Begin()
	Started(stop("new-a"))
	Started(stop("new-b"))
	Failed()
	if want := []string{"new-b", "new-a"}; !slices.Equal(stopped, want) {
		t.Fatalf("stopped %v, want %v", stopped, want)
	}
	Failed() // nothing left
	if len(stopped) != 2 {
		t.Fatalf("a second Failed stopped %v", stopped)
	}
}
