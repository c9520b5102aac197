package admission

import (
	"context"
	"sync"
)

// A slot taken with Hold travels in the caller's context, so that code
// far below the caller (the store's combiner) can give it back while it
// waits for something other than the database: a row lock held elsewhere,
// its turn behind other callers of that row, a pause before trying again.
// A caller that kept its slot through such a wait would take the budget
// from everyone else: enough of them, and every lane stalls behind one
// locked row.

type heldKey struct{}

type held struct {
	a  *Arbiter
	l  Lane
	mu sync.Mutex
	in bool // the slot is taken
}

// Hold takes a slot in lane l as Acquire does and returns ctx carrying it.
// The returned release must be called exactly once, whatever Away did in
// between: it gives the slot back only if it is still taken.
func (a *Arbiter) Hold(ctx context.Context, l Lane) (context.Context, func(), error) {
	// The slot goes back through held.give, never Acquire's releaser.
	if _, err := a.Acquire(ctx, l); err != nil {
		return ctx, nil, err
	}
	h := &held{a: a, l: l, in: true}
	return context.WithValue(ctx, heldKey{}, h), h.give, nil
}

func (h *held) give() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.in {
		h.in = false
		h.a.free(h.l)
	}
}

// Away runs wait with ctx's slot (if ctx carries one from Hold) given back,
// and takes it again before it returns, behind whoever the grant rule puts
// first. The error is ctx's when the slot could not be had again; the
// caller then holds none, and its release does nothing.
func Away(ctx context.Context, wait func()) error {
	h, _ := ctx.Value(heldKey{}).(*held)
	if h == nil {
		wait()
		return ctx.Err()
	}
	h.give()
	wait()
	if _, err := h.a.Acquire(ctx, h.l); err != nil {
		return err
	}
	h.mu.Lock()
	h.in = true
	h.mu.Unlock()
	return nil
}
