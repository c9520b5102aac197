package ids

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

func TestUUIDv7ShapeOrderAndSeededReplay(t *testing.T) {
	c := clock.NewSim(time.Unix(1_800_000_000, 0))
	a := NewSource(c, rand.NewChaCha8([32]byte{1}))
	b := NewSource(c, rand.NewChaCha8([32]byte{1}))
	prev := ""
	for i := 0; i < 5000; i++ {
		id := a.New()
		if !Valid(id) || id[14] != '7' || (id[19] != '8' && id[19] != '9' && id[19] != 'a' && id[19] != 'b') {
			t.Fatalf("not a UUIDv7: %s", id)
		}
		if id <= prev {
			t.Fatalf("ids from one source must sort by creation: %s after %s", id, prev)
		}
		if other := b.New(); other != id {
			t.Fatalf("same seed, same clock, different ids: %s vs %s", id, other)
		}
		prev = id
		if i%1000 == 0 {
			c.Advance(time.Millisecond)
		}
	}
}

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"00000000-0000-0000-0000-000000000001": true,
		"AAAAAAAA-aaaa-4aaa-8aaa-aaaaaaaaaaaa": true,
		"00000000000000000000000000000001":     false,
		"0000000-00000-0000-0000-000000000001": false,
		"g0000000-0000-0000-0000-000000000001": false,
		"":                                     false,
	} {
		if Valid(s) != want {
			t.Errorf("Valid(%q) != %v", s, want)
		}
	}
}
