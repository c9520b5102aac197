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

// readRecords returns every intact record. torn is true when the file ended
// in a damaged record, which is dropped.
func readRecords(r io.Reader) (records [][]byte, torn bool, err error) {
	br := bufio.NewReader(r)
	for {
		var h [headerLen]byte
		n, err := io.ReadFull(br, h[:])
		if err == io.EOF && n == 0 {
			return records, false, nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return records, true, nil
		}
		if err != nil {
			return records, false, fmt.Errorf("spool: read header: %w", err)
		}
		size := binary.BigEndian.Uint32(h[0:4])
		if size > maxRecord {
			return records, true, nil
		}
		payload := make([]byte, size)
		if _, err := io.ReadFull(br, payload); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
				return records, true, nil
			}
			return records, false, fmt.Errorf("spool: read record: %w", err)
		}
		if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(h[4:8]) {
			return records, true, nil
		}
		records = append(records, payload)
	}
}
