package httpapi

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// rewindBody is a request body read again on every iteration.
type rewindBody struct{ *bytes.Reader }

func (rewindBody) Close() error { return nil }

// BenchmarkParsePush: a push body of 1 and of 100 items read into items,
// the push route's decoding from the bytes read to the validated items.
func BenchmarkParsePush(b *testing.B) {
	s := fuzzServer()
	for _, n := range []int{1, 100} {
		var items []string
		for i := range n {
			items = append(items, fmt.Sprintf(`{"queue":"orders","partition":"p%d","transactionId":"tx-%d","payload":{"orderId":%d,"customer":"ada","items":[{"sku":"x-1","qty":2}]}}`, i%10, i, i))
		}
		body := []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
		b.Run(fmt.Sprintf("items-%d", n), func(b *testing.B) {
			rd := rewindBody{bytes.NewReader(body)}
			r := httptest.NewRequest("POST", "/api/v1/push", rd)
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(body)
				if _, err := s.parsePush(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseAckBatch: an ack batch of 1 and of 100 acknowledgements
// read into checked items.
func BenchmarkParseAckBatch(b *testing.B) {
	for _, n := range []int{1, 100} {
		var acks []string
		for i := range n {
			acks = append(acks, fmt.Sprintf(`{"transactionId":"tx-%d","partitionId":"01a22c56-622f-7000-85d2-8458ca5b958d","leaseId":"01a22c56-622f-7000-85d2-8458ca5b9%03d","status":"completed"}`, i, i))
		}
		body := []byte(`{"consumerGroup":"g","acknowledgments":[` + strings.Join(acks, ",") + `]}`)
		b.Run(fmt.Sprintf("acks-%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := parseAckBatch(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
