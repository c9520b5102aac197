package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Type is a frame's kind. The numbers are Queen's, so a capture reads the
// same; unknown types are ignored by the receiver.
type Type uint8

const (
	MessageAvailable      Type = 1  // {queue, partition, tenant?}
	MessageAvailableBatch Type = 2  // {items: [{queue, partition, tenant?}]}
	Heartbeat             Type = 3  // {server_id}
	Hello                 Type = 4  // {server_id, nonce}; handshake.go
	HotlistDirtyBatch     Type = 5  // {items: [{queue, partition, tenant?}]}
	QueueConfigSet        Type = 10 // {queue, tenant?}
	QueueConfigDelete     Type = 11 // {queue, tenant?}
	MaintenanceModeSet    Type = 40 // {enabled}
	PopMaintenanceModeSet Type = 41 // {enabled}
)

// MaxFrame is the largest payload a frame of an authenticated link may
// carry (hints are small); a longer length prefix closes the connection.
// Before authentication the bound is PreAuthMaxFrame.
const MaxFrame = 1 << 20

// Frame is one message on the wire: u32 big-endian length (1 + payload),
// u8 type, JSON payload.
type Frame struct {
	Type    Type
	Payload []byte
}

// encode renders f as one buffer, so that a frame is one Write and a
// fault-injecting connection can drop, delay or reorder whole frames.
func (f Frame) encode() []byte {
	b := make([]byte, 5+len(f.Payload))
	binary.BigEndian.PutUint32(b, uint32(1+len(f.Payload)))
	b[4] = byte(f.Type)
	copy(b[5:], f.Payload)
	return b
}

var errZeroLength = errors.New("mesh: zero-length frame")

// readFrame reads one frame of at most max payload bytes from r. The length
// prefix is checked before anything is allocated.
func readFrame(r io.Reader, max int) (Frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return Frame{}, errZeroLength
	}
	if n-1 > uint32(max) {
		return Frame{}, fmt.Errorf("mesh: frame of %d bytes exceeds %d", n-1, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return Frame{}, err
	}
	return Frame{Type: Type(body[0]), Payload: body[1:]}, nil
}

// Item names one partition of a queue that got messages.
type Item struct {
	Tenant    string `json:"tenant,omitempty"`
	Queue     string `json:"queue"`
	Partition string `json:"partition,omitempty"`
}

// Items is the payload of the batch frames.
type Items struct {
	Items []Item `json:"items"`
}

// QueueRef is the payload of the queue-config frames: which cached values to
// forget, never the values themselves.
type QueueRef struct {
	Tenant string `json:"tenant,omitempty"`
	Queue  string `json:"queue"`
}

// Switch is the payload of the maintenance frames.
type Switch struct {
	Enabled bool `json:"enabled"`
}

type heartbeat struct {
	ServerID string `json:"server_id"`
}
