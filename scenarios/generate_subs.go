package scenarios

import (
	"fmt"
	"strings"
	"time"

	"github.com/queen-go/queen/sim"
)

// addLateGroups gives, in seven seeds in eight, the first queue without
// retention or eviction two consumer groups that subscribe after pushes
// began (sim.LateGroup): "fresh" with subscriptionMode new, at 20-50% of
// the run, sought forward to a timestamp at 60-85%; and "since", up to ten
// seconds later, with subscriptionFrom 3-17 s back. Seed bits choose, not
// the stream, so every other choice of every seed stays as it was. (Not
// on a retention or eviction queue: the checkers' account of which
// messages retention may delete (sim.Generations) knows only the groups
// listed in Groups.)
func addLateGroups(s *Scenario, seed uint64, p plan) {
	h := seedBits(seed ^ 0x5b5c0de)
	if h%8 == 0 && !p.late {
		return
	}
	for i := range s.Queues {
		q := &s.Queues[i]
		if q.CompletedRetentionSecs > 0 || q.MaxWaitSecs > 0 {
			continue
		}
		at := s.VTime * time.Duration(20+(h>>3)%31) / 100
		q.Late = []sim.LateGroup{
			{Name: "fresh", Mode: "new", At: at, Seek: s.VTime * time.Duration(60+(h>>9)%26) / 100},
			{Name: "since", Mode: "from", At: at + time.Duration((h>>15)%11)*time.Second, Back: time.Duration(3+(h>>21)%15) * time.Second},
		}
		return
	}
}

// parseLate reads late groups: name:mode:at:back:seek, "|" between them
// (durations as Go prints them; back and seek 0s when unused).
func parseLate(v string) ([]sim.LateGroup, error) {
	var out []sim.LateGroup
	for _, g := range strings.Split(v, "|") {
		f := strings.Split(g, ":")
		if len(f) != 5 || (f[1] != "new" && f[1] != "from") {
			return nil, fmt.Errorf("late group %q: want name:new|from:at:back:seek", g)
		}
		l := sim.LateGroup{Name: f[0], Mode: f[1]}
		for i, d := range []*time.Duration{&l.At, &l.Back, &l.Seek} {
			var err error
			if *d, err = time.ParseDuration(f[2+i]); err != nil {
				return nil, fmt.Errorf("late group %q: %w", g, err)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// printLate is the queue option parseLate reads ("" when there is none).
func printLate(late []sim.LateGroup) string {
	if len(late) == 0 {
		return ""
	}
	var gs []string
	for _, l := range late {
		gs = append(gs, fmt.Sprintf("%s:%s:%v:%v:%v", l.Name, l.Mode, l.At, l.Back, l.Seek))
	}
	return ",late=" + strings.Join(gs, "|")
}
