//go:build linux

package startpages

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// written lives in the executable's writable data mapping: Release must
// leave it (and every other writable page) as the program left it.
var written = [4096 * 4]byte{1}

func TestReleaseDropsOnlyReadOnlyExecutablePages(t *testing.T) {
	for i := range written {
		written[i] = byte(i % 251)
	}
	before, after, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 || after >= before {
		t.Errorf("resident file-backed memory %d → %d bytes: Release dropped nothing", before, after)
	}
	for i := range written {
		if written[i] != byte(i%251) {
			t.Fatalf("writable data changed at %d: %d", i, written[i])
		}
	}
	// the released code runs again (from the page cache)
	if _, _, err := Release(); err != nil {
		t.Fatal(err)
	}
	if strings.Repeat("x", 3) != "xxx" {
		t.Fatal("code after Release misbehaves")
	}
}

func TestExecutableRanges(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	rs := executableRanges(smaps, uint64(st.Dev), st.Ino)
	if len(rs) == 0 {
		t.Fatalf("no read-only mapping of the executable in\n%s", maps)
	}
	for _, r := range rs { // none may overlap a writable or foreign mapping
		for _, l := range strings.Split(string(maps), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 || f[1][1] != 'w' {
				continue
			}
			lo, hi, _ := hexPair(f[0], "-")
			if uintptr(lo) < r.end && r.start < uintptr(hi) {
				t.Errorf("range %#x-%#x overlaps writable mapping %s", r.start, r.end, l)
			}
		}
	}
	m := func(header string, anon int) string {
		return header + "\nSize: 1024 kB\nRss: 512 kB\nAnonymous: " + strconv.Itoa(anon) + " kB\nVmFlags: rd mr mw me\n"
	}
	fake := []byte(m("00400000-00500000 r-xp 00000000 fe:00 42 /x", 0) +
		m("00500000-00600000 rw-p 00100000 fe:00 42 /x", 0) +
		m("00600000-00700000 r--p 00200000 fe:00 42 /x", 0) +
		m("00700000-00800000 r--s 00000000 fe:00 42 /x", 0) +
		m("00800000-00900000 r--p 00000000 fe:00 43 /y", 0) +
		m("00900000-00a00000 r--p 00000000 fe:01 42 /z", 0) +
		m("00a00000-00b00000 r--p 00300000 fe:00 42 /x", 8) + // relocated RELRO: copy-on-write pages
		"00b00000-00c00000 r--p 00400000 fe:00 42 /x\nRss: 4 kB\n" + // no Anonymous line
		m("7ffd0000-7ffd1000 r-xp 00000000 00:00 0 [vdso]", 0))
	got := executableRanges(fake, 0xfe00, 42)
	want := []addrRange{{0x400000, 0x500000}, {0x600000, 0x700000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ranges %x, want %x", got, want)
	}
}
