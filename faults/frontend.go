package faults

import (
	"bytes"
	"encoding/binary"
)

// frontend follows message boundaries in what a PostgreSQL client sends,
// so the proxy can tell a COMMIT from bytes that merely look like one.
// Startup packets (SSL and GSS requests, the startup message) have no type
// byte; every later message is a type byte and a length that counts
// itself.
type frontend struct {
	typed bool   // past the startup packets
	hdr   []byte // partial header
	typ   byte
	need  int    // body bytes still to come
	body  []byte // the head of the body (enough to recognise COMMIT)
}

// Startup codes of packets after which another startup packet follows.
const (
	sslRequest = 80877103
	gssRequest = 80877104
)

// maxInspect is how much of a message body is kept to recognise it.
const maxInspect = 32

// scan consumes b and reports whether a simple-query COMMIT (or END) ended
// in it.
func (f *frontend) scan(b []byte) (commit bool) {
	for len(b) > 0 {
		if f.need == 0 && len(f.hdr) < f.hdrLen() {
			take := min(f.hdrLen()-len(f.hdr), len(b))
			f.hdr, b = append(f.hdr, b[:take]...), b[take:]
			if len(f.hdr) < f.hdrLen() {
				return commit
			}
			n := int(binary.BigEndian.Uint32(f.hdr[f.hdrLen()-4:]))
			f.typ, f.need, f.body = 0, max(n-4, 0), f.body[:0]
			if f.typed {
				f.typ = f.hdr[0]
			}
			if f.need == 0 {
				commit = f.end() || commit
			}
			continue
		}
		take := min(f.need, len(b))
		if keep := min(take, maxInspect-len(f.body)); keep > 0 {
			f.body = append(f.body, b[:keep]...)
		}
		f.need, b = f.need-take, b[take:]
		if f.need == 0 {
			commit = f.end() || commit
		}
	}
	return commit
}

func (f *frontend) hdrLen() int {
	if f.typed {
		return 5
	}
	return 4
}

// end closes the current message and reports whether it was a COMMIT.
func (f *frontend) end() bool {
	f.hdr = f.hdr[:0]
	if !f.typed {
		code := uint32(0)
		if len(f.body) >= 4 {
			code = binary.BigEndian.Uint32(f.body)
		}
		f.typed = code != sslRequest && code != gssRequest
		return false
	}
	if f.typ != 'Q' {
		return false
	}
	q := bytes.ToLower(bytes.TrimRight(bytes.TrimSpace(bytes.TrimRight(f.body, "\x00")), "; "))
	return string(q) == "commit" || string(q) == "end"
}
