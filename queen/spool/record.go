package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A record is: u32 big-endian payload length | u32 big-endian CRC-32C of
// the payload | payload. A record cut short by a crash or a torn write, or
// one whose checksum does not match, ends the file: what follows it is
// ignored. Writers never append after a failed write (they start a new
// file), so only a file's tail can be torn.

const (
	headerLen = 8
	// maxRecord bounds a record so a corrupt length cannot make the reader
	// allocate the world.
	maxRecord = 256 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrTornTail reports that a file ended in an incomplete or corrupt record.
var ErrTornTail = errors.New("spool: torn tail")

func appendRecord(buf, payload []byte) []byte {
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[4:8], crc32.Checksum(payload, castagnoli))
	buf = append(buf, h[:]...)
	return append(buf, payload...)
}

// recordReader yields a file's intact records one at a time, so a replay
// holds one batch in memory, not the file.
type recordReader struct {
	br   *bufio.Reader
	torn bool // the file ended in a damaged record, which was dropped
}

func newRecordReader(r io.Reader) *recordReader { return &recordReader{br: bufio.NewReader(r)} }

// next returns the next intact record, or io.EOF at the end of the file or
// at a torn tail (torn is then set).
func (rr *recordReader) next() ([]byte, error) {
	var h [headerLen]byte
	n, err := io.ReadFull(rr.br, h[:])
	if err == io.EOF && n == 0 {
		return nil, io.EOF
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		rr.torn = true
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("spool: read header: %w", err)
	}
	size := binary.BigEndian.Uint32(h[0:4])
	if size > maxRecord {
		rr.torn = true
		return nil, io.EOF
	}
	// Read what is there rather than allocate what the header claims: a
	// damaged length must not cost 256 MiB.
	payload, err := io.ReadAll(io.LimitReader(rr.br, int64(size)))
	if err != nil {
		return nil, fmt.Errorf("spool: read record: %w", err)
	}
	if len(payload) < int(size) {
		rr.torn = true
		return nil, io.EOF
	}
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(h[4:8]) {
		rr.torn = true
		return nil, io.EOF
	}
	return payload, nil
}
