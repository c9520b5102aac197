package faults

import (
	"encoding/binary"
	"testing"
)

func msg(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

func startup(code uint32, rest string) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, uint32(8+len(rest)))
	binary.BigEndian.PutUint32(b[4:], code)
	return append(b, rest...)
}

// The scanner finds a COMMIT however the stream is cut into chunks, and
// only a simple-query COMMIT: a query that merely mentions the word, or a
// startup packet that carries it, is not one.
func TestFrontendFindsCommitsAcrossChunks(t *testing.T) {
	var stream []byte
	stream = append(stream, startup(sslRequest, "")...)
	stream = append(stream, startup(196608, "user\x00commit\x00\x00")...)
	stream = append(stream, msg('Q', "select 'commit'\x00")...)
	stream = append(stream, msg('P', "\x00commit\x00\x00\x00")...)
	stream = append(stream, msg('S', "")...)
	stream = append(stream, msg('Q', "COMMIT;\x00")...)
	stream = append(stream, msg('Q', "begin\x00")...)
	for _, chunk := range []int{1, 2, 3, 7, len(stream)} {
		f, found, at := &frontend{}, 0, -1
		for i := 0; i < len(stream); i += chunk {
			if f.scan(stream[i:min(i+chunk, len(stream))]) {
				found++
				at = i
			}
		}
		if found != 1 {
			t.Fatalf("chunks of %d: found %d commits, want 1", chunk, found)
		}
		end := len(stream) - len(msg('Q', "begin\x00"))
		if at >= end || at+chunk < end {
			t.Fatalf("chunks of %d: commit reported in the chunk at %d, want the one ending at %d", chunk, at, end)
		}
	}
}
