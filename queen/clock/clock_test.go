package clock

import (
	"testing"
	"time"
)

func TestSimFiresTimersInDeadlineOrderOnlyWhenAdvanced(t *testing.T) {
	s := NewSim(time.Unix(0, 0))
	late, early := s.NewTimer(2*time.Second), s.NewTimer(time.Second)
	stopped := s.NewTimer(time.Second)
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer reports false")
	}
	select {
	case <-early.C():
		t.Fatal("fired before time moved")
	default:
	}
	if at, ok := s.NextTimer(); !ok || at != time.Unix(1, 0) {
		t.Fatalf("next timer %v %v", at, ok)
	}
	s.Advance(1500 * time.Millisecond)
	if got := <-early.C(); got != time.Unix(1, 0) {
		t.Fatalf("fired at %v", got)
	}
	select {
	case <-late.C():
		t.Fatal("late timer fired early")
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	s.Advance(time.Second)
	<-late.C()
	if late.Stop() {
		t.Fatal("Stop after firing reports true")
	}
	if now := s.Now(); now != time.Unix(2, 500_000_000) {
		t.Fatalf("now %v", now)
	}
}

func TestSkewedClockShiftsNowNotTimers(t *testing.T) {
	s := NewSim(time.Unix(100, 0))
	k := Skewed{Base: s, Offset: 7 * time.Second}
	if k.Now() != time.Unix(107, 0) {
		t.Fatalf("skewed now %v", k.Now())
	}
	tm := k.NewTimer(time.Second)
	s.Advance(time.Second)
	<-tm.C()
}
