// Package procstatus reads the kB fields of /proc/PID/status (VmRSS,
// RssAnon, RssFile, VmHWM, …) for meshdns, its tests and its benchmarks.
package procstatus

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// KiB returns field (such as "RssFile") of process pid's status in KiB;
// pid 0 is this process.
func KiB(pid int, field string) (int64, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no field %s", path, field)
}
