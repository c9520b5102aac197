package combine

import (
	"context"
	"slices"

	"github.com/queen-go/queen/queen/admission"
)

// runAlone runs rows outside the slots: all at once, or with AloneByKey
// one key's rows at a time, so that waiting for one key's lock holds no
// other key's turn.
func (c *Combiner[In, Out]) runAlone(ctx context.Context, rows []In) ([]Out, error) {
	if !c.o.AloneByKey {
		return c.runAloneHeld(ctx, rows)
	}
	groups := c.byKey(rows)
	if len(groups) == 1 {
		return c.runAloneHeld(ctx, rows)
	}
	out := make([]Out, len(rows))
	for _, idx := range groups {
		sub := make([]In, len(idx))
		for j, i := range idx {
			sub[j] = rows[i]
		}
		res, err := c.runAloneHeld(ctx, sub)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			out[i] = res[j]
		}
	}
	return out, nil
}

// byKey groups the positions of rows by key, keys in order of first
// appearance and rows in order within each.
func (c *Combiner[In, Out]) byKey(rows []In) [][]int {
	var groups [][]int
	at := map[string]int{}
	for i, r := range rows {
		k := c.o.Key(r)
		g, ok := at[k]
		if !ok {
			g = len(groups)
			at[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// runAloneHeld runs rows outside the slots, their keys held meanwhile. Calls
// on one key run alone one at a time (their turn, keys taken in order): a
// locked row costs one connection trying it, not one per writer waiting.
// A call waiting for its turn gives its admission slot back meanwhile
// (admission.Away), so the writers of a locked row never hold the budget
// everyone else needs.
func (c *Combiner[In, Out]) runAloneHeld(ctx context.Context, rows []In) ([]Out, error) {
	keys := make([]string, 0, len(rows))
	for _, r := range rows {
		keys = append(keys, c.o.Key(r))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	turns := c.hold(keys)
	taken := 0
	defer func() {
		for _, t := range turns[:taken] {
			<-t.ch
		}
		c.release(keys, turns)
	}()
	for _, t := range turns {
		if err := t.take(ctx); err != nil {
			return nil, err
		}
		taken++
	}
	return c.o.Alone(ctx, rows)
}

// hold counts one more call running alone on each of keys and returns
// their turns.
func (c *Combiner[In, Out]) hold(keys []string) []*turn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = map[string]*turn{}
	}
	turns := make([]*turn, len(keys))
	for i, k := range keys {
		if c.held[k] == nil {
			c.held[k] = &turn{ch: make(chan struct{}, 1)}
		}
		turns[i] = c.held[k]
		turns[i].n++
	}
	return turns
}

// release undoes hold: a key no call runs alone on any more is free.
func (c *Combiner[In, Out]) release(keys []string, turns []*turn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range keys {
		if turns[i].n--; turns[i].n == 0 {
			delete(c.held, k)
		}
	}
}

// turn orders the calls running alone on one key.
type turn struct {
	n  int           // calls running alone on the key, waiting or not; under mu
	ch chan struct{} // holds a token while one of them runs
}

// take waits for the key's turn, away from its admission slot if it must
// wait at all.
func (t *turn) take(ctx context.Context) error {
	select {
	case t.ch <- struct{}{}:
		return nil
	default:
	}
	got := false
	err := admission.Away(ctx, func() {
		select {
		case t.ch <- struct{}{}:
			got = true
		case <-ctx.Done():
		}
	})
	if err != nil && got {
		<-t.ch // the turn came, the slot did not: pass the turn on
	}
	if err == nil && !got {
		err = ctx.Err()
	}
	return err
}
