package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzRecordReader: any bytes, as a spool file, read without a panic and
// without allocating what a damaged header claims; every record returned
// carries a matching checksum, and a file of records written by Encode
// reads back whole.
func FuzzRecordReader(f *testing.F) {
	good, _ := Encode([]Event{{Queue: "q", Partition: "p", TransactionID: "t", Payload: json.RawMessage(`{"a":1}`)}})
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add([]byte{0xff, 0xff, 0xff, 0x00, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		rr := newRecordReader(bytes.NewReader(data))
		read := 0
		for {
			rec, err := rr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reading from memory cannot fail otherwise: %v", err)
			}
			read += headerLen + len(rec)
			var e Event
			_ = json.Unmarshal(rec, &e) // a record that does not decode is the drain's to refuse
		}
		if read > len(data) {
			t.Fatalf("read %d bytes of records from %d bytes", read, len(data))
		}
		// Appending a good record after the input changes nothing about
		// the input's own records: readers never resynchronise past a
		// torn record.
		if !rr.torn && read == len(data) {
			rr = newRecordReader(bytes.NewReader(append(append([]byte{}, data...), good...)))
			n := 0
			for {
				if _, err := rr.next(); err != nil {
					break
				}
				n++
			}
			if n == 0 {
				t.Fatal("a good record after intact ones was not read")
			}
		}
	})
}
