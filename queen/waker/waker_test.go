package waker

import "testing"

func woken(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A push wakes, per group, as many parked pops as partitions it filled,
// oldest first; the rest stay parked.
func TestNotifyWakesNPerGroupOldestFirst(t *testing.T) {
	h := New()
	k := Key("t", "q")
	a1, wa1 := h.Wait(k, "a")
	a2, wa2 := h.Wait(k, "a")
	a3, wa3 := h.Wait(k, "a")
	b1, wb1 := h.Wait(k, "b")
	h.Notify(k, 2)
	if !woken(a1) || !woken(a2) || woken(a3) || !woken(b1) {
		t.Fatalf("after Notify(2): a1 %v a2 %v a3 %v b1 %v", woken(a1), woken(a2), woken(a3), woken(b1))
	}
	wa1(false) // re-checks itself: nothing passed on
	if woken(a3) {
		t.Fatal("a re-checking pop passed its wake on")
	}
	wa2(true) // answered: its wake goes to the next pop of its group
	if !woken(a3) {
		t.Fatal("an answering pop did not pass its wake on")
	}
	wa3(false)
	wb1(false)
	if h.Len() != 0 {
		t.Fatalf("hub keeps %d keys after every pop left", h.Len())
	}
}

// Keys that are only polled leave nothing behind.
func TestWithdrawnWaitersLeaveNoEntries(t *testing.T) {
	h := New()
	for i := 0; i < 100; i++ {
		_, withdraw := h.Wait(Key("t", string(rune('a'+i%26))), "g")
		withdraw(true)
	}
	if h.Len() != 0 {
		t.Fatalf("%d keys left", h.Len())
	}
}

// Parked counts waiters, not keys: two groups on one key and a second
// waiter of one group are three parked pops.
func TestParkedCountsEveryWaiter(t *testing.T) {
	h := New()
	_, w1 := h.Wait(Key("t", "q"), "a")
	_, w2 := h.Wait(Key("t", "q"), "a")
	_, w3 := h.Wait(Key("t", "q"), "b")
	if n := h.Parked(); n != 3 || h.Len() != 1 {
		t.Fatalf("Parked %d, Len %d; want 3 and 1", n, h.Len())
	}
	w1(false)
	w2(false)
	w3(false)
	if n := h.Parked(); n != 0 {
		t.Fatalf("Parked %d after every withdraw", n)
	}
}
