package spool

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/queen-go/queen/queen/canary"
)

// A record is: u32 big-endian payload length | u32 big-endian CRC-32C of
// the payload | payload. Writers append whole records and never append
// after a failed write (they start a new file), so damage comes in two
// kinds, told apart by what follows it:
//
//   - A torn tail: the file ends inside a record (a header cut short, or a
//     payload shorter than its length says) and nothing intact follows.
//     That write failed, so no push was answered "buffered" for it: it is
//     dropped.
//   - Corruption: a record whose checksum fails (or whose payload is not
//     a JSON object, as every event is), whose length is impossible, or that runs past the end of the file while an intact
//     record follows it. The reader resynchronises on the next intact
//     record (a plausible header whose payload matches its checksum) and
//     reports the damaged bytes, which the drain quarantines with the
//     reason; with nothing intact after it, the rest of the file is
//     reported. Damage never hides the records after it.

const (
	headerLen = 8
	// maxRecord bounds a record so a corrupt length cannot make the reader
	// allocate the world.
	maxRecord = 256 << 20
	// minRecord: every event is a JSON object, so a record's payload is
	// at least "{}" and starts with '{'. A shorter one, or one starting
	// otherwise, is damage even when its checksum matches: eight zero
	// bytes are a zero-length record with a matching checksum, and would
	// otherwise swallow the start of the record after them.
	minRecord = 2
	// resyncWindow is how much of the file a resynchronisation scans per
	// read.
	resyncWindow = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendRecord(buf, payload []byte) []byte {
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[4:8], crc32.Checksum(payload, castagnoli))
	buf = append(buf, h[:]...)
	return append(buf, payload...)
}

// damage is a run of bytes of a spool file that holds no intact record.
type damage struct {
	Offset, Length int64
	Reason         string // the first fault found in it, with its offset
}

// recordReader yields a file's intact records one at a time, so a replay
// holds one batch in memory, not the file. It needs random access to
// resynchronise after damage.
type recordReader struct {
	ra   io.ReaderAt
	size int64
	off  int64         // where the next record starts
	br   *bufio.Reader // reads on from off

	torn    bool  // the file ended in a record cut short, which was dropped
	tornAt  int64 // where that record started
	damaged []damage
}

func newRecordReader(ra io.ReaderAt, size int64) *recordReader {
	rr := &recordReader{ra: ra, size: size}
	rr.seek(0)
	return rr
}

func (rr *recordReader) seek(off int64) {
	rr.off = off
	sr := io.NewSectionReader(rr.ra, off, rr.size-off)
	if rr.br == nil {
		rr.br = bufio.NewReader(sr)
		return
	}
	rr.br.Reset(sr)
}

// next returns the next intact record and its offset, or io.EOF at the end
// of the file. Damage on the way is recorded (damaged, torn), not returned:
// an error is the file's reading failing.
func (rr *recordReader) next() ([]byte, int64, error) {
	for rr.off < rr.size {
		start := rr.off
		if rr.size-start < headerLen {
			rr.tear()
			break
		}
		var h [headerLen]byte
		if _, err := io.ReadFull(rr.br, h[:]); err != nil {
			return nil, start, fmt.Errorf("read header at offset %d: %w", start, err)
		}
		size := int64(binary.BigEndian.Uint32(h[0:4]))
		// Only what the file holds is ever allocated, whatever a damaged
		// header claims.
		fits := size >= minRecord && size <= maxRecord && size <= rr.size-start-headerLen
		if fits {
			payload := make([]byte, size)
			if _, err := io.ReadFull(rr.br, payload); err != nil {
				return nil, start, fmt.Errorf("read record at offset %d: %w", start, err)
			}
			if payload[0] == '{' && crc32.Checksum(payload, castagnoli) == binary.BigEndian.Uint32(h[4:8]) {
				rr.off = start + headerLen + size
				return payload, start, nil
			}
		}
		if err := rr.skipDamage(start, size, fits); err != nil {
			return nil, start, err
		}
	}
	return nil, rr.off, io.EOF
}

// skipDamage moves past a bad record at start: to the next intact record
// when there is one (the bytes between are damage), else to the end of the
// file (a torn tail when the record is merely cut short, damage otherwise).
func (rr *recordReader) skipDamage(start, size int64, fits bool) error {
	if canary.On("spool-corrupt-drops-rest") {
		rr.tear() // as before issue 28 item 2: any bad record is a torn tail
		return nil
	}
	var why string
	switch {
	case fits:
		why = fmt.Sprintf("checksum mismatch at offset %d", start)
	case size < minRecord || size > maxRecord:
		why = fmt.Sprintf("damaged length at offset %d: %d bytes is no event's length", start, size)
	default:
		why = fmt.Sprintf("damaged length at offset %d: %d bytes runs past the end of the file", start, size)
	}
	next, found, err := rr.resync(start + 1)
	switch {
	case err != nil:
		return err
	case found:
		rr.reject(start, next-start, why)
		rr.seek(next)
	case size >= minRecord && size <= maxRecord && !fits:
		rr.tear()
	default:
		rr.reject(start, rr.size-start, why+"; no intact record after it")
		rr.off = rr.size
	}
	return nil
}

// tear ends the file at a record cut short.
func (rr *recordReader) tear() {
	rr.torn, rr.tornAt, rr.off = true, rr.off, rr.size
}

// reject records length bytes at off as damage; a run adjacent to the
// previous one extends it (a stretch of zeros is one entry, not thousands).
func (rr *recordReader) reject(off, length int64, why string) {
	if n := len(rr.damaged); n > 0 && rr.damaged[n-1].Offset+rr.damaged[n-1].Length == off {
		rr.damaged[n-1].Length += length
		return
	}
	rr.damaged = append(rr.damaged, damage{Offset: off, Length: length, Reason: why})
}

// resync finds the first intact record starting at or after from: a header
// whose length fits in the file and whose payload starts as every event
// does ('{') and matches its checksum.
func (rr *recordReader) resync(from int64) (int64, bool, error) {
	buf := make([]byte, resyncWindow+headerLen+1)
	for base := from; base+headerLen+1 <= rr.size; base += resyncWindow {
		n, err := rr.ra.ReadAt(buf[:min(int64(len(buf)), rr.size-base)], base)
		if err != nil && err != io.EOF {
			return 0, false, fmt.Errorf("read at offset %d: %w", base, err)
		}
		win := buf[:n]
		for i := 0; i < resyncWindow && i+headerLen+1 <= len(win); i++ {
			p := base + int64(i)
			size := int64(binary.BigEndian.Uint32(win[i:]))
			if size < minRecord || size > maxRecord || p+headerLen+size > rr.size || win[i+headerLen] != '{' {
				continue
			}
			ok, err := rr.intact(p+headerLen, size, binary.BigEndian.Uint32(win[i+4:]))
			if err != nil {
				return 0, false, err
			}
			if ok {
				return p, true, nil
			}
		}
	}
	return 0, false, nil
}

// intact checks size bytes at off against sum without holding them.
func (rr *recordReader) intact(off, size int64, sum uint32) (bool, error) {
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, io.NewSectionReader(rr.ra, off, size)); err != nil {
		return false, fmt.Errorf("read record at offset %d: %w", off-headerLen, err)
	}
	return h.Sum32() == sum, nil
}
