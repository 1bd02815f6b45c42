package table

import (
	"bufio"
	"net/netip"
	"strconv"
)

// ListEntries writes every entry of t as a JSON object, one a line,
// without allocating per entry beyond the ambiguous ones' addresses.
func (t *Table) ListEntries(bw *bufio.Writer) {
	var buf []byte
	first := true
	for key, i := range t.index {
		buf = buf[:0]
		if !first {
			buf = append(buf, ',')
		}
		first = false
		// keys hold only [a-z0-9._-]: no JSON escaping needed.
		buf = append(buf, "\n{\"key\":\""...)
		buf = append(buf, key...)
		buf = append(buf, "\",\"addresses\":["...)
		v := &t.vips[i]
		switch v.fam {
		case Fam4:
			buf = appendAddr(buf, netip.AddrFrom4([4]byte(v.ip[:4])), false)
		case Fam6:
			buf = appendAddr(buf, netip.AddrFrom16(v.ip), false)
		case FamDual:
			buf = appendAddr(buf, netip.AddrFrom4([4]byte(v.ip[:4])), false)
			buf = appendAddr(buf, netip.AddrFrom16(t.dual[i]), true)
		default:
			for j, a := range t.multi[i] {
				buf = appendAddr(buf, a, j > 0)
			}
		}
		buf = append(buf, "],\"ambiguous\":"...)
		buf = strconv.AppendBool(buf, v.fam == FamAmbiguous)
		buf = append(buf, '}')
		bw.Write(buf)
	}
}

func appendAddr(buf []byte, a netip.Addr, comma bool) []byte {
	if comma {
		buf = append(buf, ',')
	}
	buf = append(buf, '"')
	buf = a.AppendTo(buf)
	return append(buf, '"')
}
