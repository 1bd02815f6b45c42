package persist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
)

// The change log of a snapshot, PATH.log beside PATH: what changed since
// the snapshot was written, appended change by change, so that a change
// costs disk writes in proportion to itself and the whole snapshot is
// rewritten only now and then (compaction, Writer.ChangeLog).
//
// Its first line names the snapshot it follows:
//
//	meshdns-snapshot-log/1 <snapshot file name> <snapshot size> <CRC-32C of the snapshot, 8 hex digits>\n
//
// and is followed by records, each framed as
//
//	length (4 bytes, big endian) | CRC-32C of length and payload (4 bytes, big endian) | payload
//
// A payload is opaque here (the plugin's change, in its model's form). A
// reader takes the records in order up to the first that is cut short or
// whose CRC does not match (a crash in the middle of an append, a
// corrupted disk): everything before it is good, nothing after it is used.
// A log whose first line names another snapshot (one written since, by a
// compaction the crash interrupted before the new log was in place) is
// ignored whole: its records were made against another base.
//
// Invariant: a log's records, replayed in order onto the snapshot its
// header names, give the state the writer last appended; each record holds
// the whole new content of what it changes, so replaying one that the
// snapshot already holds does no harm.

// LogFormat is the first word of a change log.
const LogFormat = "meshdns-snapshot-log/1"

// maxRecord bounds a record's length: a length beyond it is corruption.
const maxRecord = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// LogPath is the change log of the snapshot at path.
func LogPath(path string) string { return path + ".log" }

// Base identifies the snapshot a change log follows: its file name, size
// and CRC-32C.
type Base struct {
	Name string
	Size int64
	CRC  uint32
}

// BaseOf is the identity of snapshot content b written at path.
func BaseOf(path string, b []byte) Base {
	return Base{Name: filepath.Base(path), Size: int64(len(b)), CRC: crc32.Checksum(b, castagnoli)}
}

// logHeader is a log's first line for base.
func logHeader(base Base) []byte {
	return fmt.Appendf(nil, "%s %s %d %08x\n", LogFormat, strconv.Quote(base.Name), base.Size, base.CRC)
}

// recordHead is a record's framing: its length and CRC.
const recordHead = 8

// AppendRecord appends payload framed as a log record to dst.
func AppendRecord(dst, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recordHead)...)
	dst = append(dst, payload...)
	frame(dst[start:])
	return dst
}

// frame fills rec's head (its first recordHead bytes) for the payload
// after it.
func frame(rec []byte) {
	head, payload := rec[:recordHead], rec[recordHead:]
	binary.BigEndian.PutUint32(head[:4], uint32(len(payload)))
	crc := crc32.Update(crc32.Checksum(head[:4], castagnoli), castagnoli, payload)
	binary.BigEndian.PutUint32(head[4:], crc)
}

// ErrOtherBase: the log follows another snapshot than the one read.
var ErrOtherBase = errors.New("the change log follows another snapshot")

// ParseLog reads log b against snapshot base. It returns the payloads of
// the good records, in order (sub-slices of b), and where each ends in b.
// tail is nil when every byte of b was good; otherwise it says where and
// why reading stopped (records before that point are still returned). A
// header that is not this format's or names another base returns no
// records and tail wrapping ErrOtherBase (or the header's error).
func ParseLog(b []byte, base Base) (recs [][]byte, ends []int, tail error) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return nil, nil, errors.New("change log: no complete header line")
	}
	if !bytes.Equal(b[:nl+1], logHeader(base)) {
		if !bytes.HasPrefix(b, []byte(LogFormat+" ")) {
			return nil, nil, fmt.Errorf("change log: header %q is not %s", clip(b[:nl]), LogFormat)
		}
		return nil, nil, fmt.Errorf("%w (header %q)", ErrOtherBase, clip(b[:nl]))
	}
	off := nl + 1
	for off < len(b) {
		if len(b)-off < 8 {
			return recs, ends, fmt.Errorf("change log: record at offset %d cut short (%d of 8 header bytes)", off, len(b)-off)
		}
		n := binary.BigEndian.Uint32(b[off : off+4])
		if n > maxRecord || int64(n) > int64(len(b)-off-8) {
			return recs, ends, fmt.Errorf("change log: record at offset %d cut short or corrupt (length %d, %d bytes left)", off, n, len(b)-off-8)
		}
		payload := b[off+8 : off+8+int(n)]
		crc := crc32.Update(crc32.Checksum(b[off:off+4], castagnoli), castagnoli, payload)
		if crc != binary.BigEndian.Uint32(b[off+4:off+8]) {
			return recs, ends, fmt.Errorf("change log: record at offset %d fails its CRC", off)
		}
		recs = append(recs, payload)
		off += 8 + int(n)
		ends = append(ends, off)
	}
	return recs, ends, nil
}

// clip shortens a header for an error message.
func clip(b []byte) []byte {
	if len(b) > 120 {
		return b[:120]
	}
	return b
}

// Snapshot is a snapshot as read at start: its content and the payloads
// of its change log's good records.
type Snapshot struct {
	Base    []byte   // nil: no snapshot
	Records [][]byte // the log's good records, in order
	// LogTail says why the log was not read to its end, or ignored
	// (ErrOtherBase); nil when it was read whole or there is none. The
	// snapshot and Records are still good: a caller logs it and goes on.
	LogTail error
}

// ReadWithLog reads the snapshot at path and its change log. A missing
// snapshot is (Snapshot{}, nil); a missing log is no records. Only a
// snapshot that cannot be read is an error: a log that cannot be read or
// ends badly is reported in LogTail.
func ReadWithLog(path string) (Snapshot, error) {
	b, err := ReadFile(path)
	if err != nil || b == nil {
		return Snapshot{}, err
	}
	s := Snapshot{Base: b}
	lb, err := os.ReadFile(LogPath(path))
	switch {
	case os.IsNotExist(err):
		return s, nil
	case err != nil:
		s.LogTail = fmt.Errorf("change log %s: %w", LogPath(path), err)
		return s, nil
	}
	s.Records, _, s.LogTail = ParseLog(lb, BaseOf(path, b))
	return s, nil
}
