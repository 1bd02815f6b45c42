//go:build linux

package procstatus

import (
	"os"
	"testing"
)

func TestKiB(t *testing.T) {
	self, err := KiB(0, "VmRSS")
	if err != nil || self <= 0 {
		t.Fatalf("VmRSS of this process: %d, %v", self, err)
	}
	if byPID, err := KiB(os.Getpid(), "VmHWM"); err != nil || byPID < self/2 {
		t.Fatalf("VmHWM by PID: %d, %v (VmRSS %d)", byPID, err, self)
	}
	if _, err := KiB(0, "NoSuchField"); err == nil {
		t.Fatal("a missing field gave no error")
	}
}
