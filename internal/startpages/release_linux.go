package startpages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/meshdns/meshdns/internal/procstatus"
)

// Release drops the process's read-only mappings of its executable from
// its resident set and returns the resident file-backed memory before and
// after, in bytes.
func Release() (before, after int64, err error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		return 0, 0, fmt.Errorf("stat executable: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, 0, err
	}
	before = residentFile()
	for _, r := range executableRanges(smaps, uint64(st.Dev), st.Ino) {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_DONTNEED); e != 0 {
			return before, residentFile(), fmt.Errorf("madvise %#x-%#x: %w", r.start, r.end, e)
		}
	}
	return before, residentFile(), nil
}

type addrRange struct{ start, end uintptr }

// executableRanges parses /proc/self/smaps and returns the ranges that map
// the file dev:ino privately, without write permission, and hold no
// anonymous page. A page of a read-only file mapping is anonymous when it
// was written before (copy on write): relocations in a position-independent
// build's RELRO segment, a debugger's breakpoint. Dropping such a page would
// bring back the file's bytes, so a mapping with any is left alone, and so
// is one whose smaps entry has no Anonymous line.
func executableRanges(smaps []byte, dev, ino uint64) []addrRange {
	var out []addrRange
	var cur addrRange
	candidate, clean := false, false
	flush := func() {
		if candidate && clean {
			out = append(out, cur)
		}
		candidate, clean = false, false
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4 {
			// a mapping: address perms offset dev inode [path]
			flush()
			cur, candidate = executableRange(f, dev, ino)
			continue
		}
		if candidate && len(f) >= 2 && f[0] == "Anonymous:" {
			clean = f[1] == "0"
		}
	}
	flush()
	return out
}

// executableRange returns the range of an smaps header line and whether it
// maps the file dev:ino privately without write permission.
func executableRange(f []string, dev, ino uint64) (addrRange, bool) {
	if f[1][1] == 'w' || f[1][3] != 'p' {
		return addrRange{}, false
	}
	if i, err := strconv.ParseUint(f[4], 10, 64); err != nil || i != ino || i == 0 {
		return addrRange{}, false
	}
	major, minor, ok := hexPair(f[3], ":")
	if !ok || unix.Mkdev(uint32(major), uint32(minor)) != dev {
		return addrRange{}, false
	}
	a, b, ok := hexPair(f[0], "-")
	if !ok || b <= a {
		return addrRange{}, false
	}
	return addrRange{uintptr(a), uintptr(b)}, true
}

// hexPair parses "X<sep>Y", both hexadecimal.
func hexPair(s, sep string) (x, y uint64, ok bool) {
	xs, ys, ok := strings.Cut(s, sep)
	if !ok {
		return 0, 0, false
	}
	x, err1 := strconv.ParseUint(xs, 16, 64)
	y, err2 := strconv.ParseUint(ys, 16, 64)
	return x, y, err1 == nil && err2 == nil
}

// residentFile is this process's RssFile in bytes (-1 if unknown).
func residentFile() int64 {
	kib, err := procstatus.KiB(0, "RssFile")
	if err != nil {
		return -1
	}
	return kib << 10
}
