package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"testing"
)

// FuzzRecordReader: any bytes, as a spool file, read without a panic and
// without allocating more than the file holds; the records returned, the
// damaged runs and the torn tail cover the file exactly, each byte once;
// and a good record appended after any input is read back (damage never
// hides what follows it).
func FuzzRecordReader(f *testing.F) {
	good, _ := Encode([]Event{{Queue: "q", Partition: "p", TransactionID: "t", Payload: json.RawMessage(`{"a":1}`)}})
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(append(append([]byte{}, good...), good...))
	flipped := append(append([]byte{}, good...), good...)
	flipped[12] ^= 1
	f.Add(flipped)
	f.Add([]byte{0xff, 0xff, 0xff, 0x00, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		spans, _ := readAll(t, data)
		sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
		at := int64(0)
		for _, s := range spans {
			if s[0] != at || s[1] <= 0 {
				t.Fatalf("spans %v do not cover %d bytes exactly once (at %d)", spans, len(data), at)
			}
			at += s[1]
		}
		if at != int64(len(data)) {
			t.Fatalf("spans %v cover %d of %d bytes", spans, at, len(data))
		}
		_, last := readAll(t, append(append([]byte{}, data...), good...))
		if last != int64(len(data)) {
			t.Fatalf("the good record appended at %d was not read back last (last record at %d)", len(data), last)
		}
	})
}

// readAll reads data as a spool file: the [offset, length] of every
// record, damaged run and torn tail, and the offset of the last record.
func readAll(t *testing.T, data []byte) ([][2]int64, int64) {
	t.Helper()
	rr := newRecordReader(bytes.NewReader(data), int64(len(data)))
	var spans [][2]int64
	last := int64(-1)
	for {
		rec, off, err := rr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading from memory cannot fail otherwise: %v", err)
		}
		spans = append(spans, [2]int64{off, headerLen + int64(len(rec))})
		last = off
		var e Event
		_ = json.Unmarshal(rec, &e) // a record that does not decode is the drain's to quarantine
	}
	for _, d := range rr.damaged {
		spans = append(spans, [2]int64{d.Offset, d.Length})
	}
	if rr.torn {
		spans = append(spans, [2]int64{rr.tornAt, int64(len(data)) - rr.tornAt})
	}
	return spans, last
}
