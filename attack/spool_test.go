//go:build attack

package attack

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/queen-go/queen/faults"
)

// load pushes unique items into queue from workers goroutines until stop
// is closed, and returns the transactionIds the brokers acknowledged.
func (p *probe) load(urls []func() string, queue string, workers int, stop <-chan struct{}) func() []string {
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				txid := fmt.Sprintf("w%d-%d", w, i)
				url := urls[i%len(urls)]()
				if a := p.pushItems(url, item(queue, fmt.Sprintf("p%d", w), txid)); acknowledged(a) {
					mu.Lock()
					acked = append(acked, txid)
					mu.Unlock()
				} else if a.code == -1 {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return func() []string { wg.Wait(); return acked }
}

// probeSharedSpool (item 1): a second broker given a live broker's
// FILE_BUFFER_DIR must refuse to start naming the holder; then PostgreSQL
// is cut under push load and every acknowledged push must be stored once.
func probeSharedSpool(p *probe) {
	db, proxy := p.proxied(p.database())
	dir := filepath.Join(p.t.TempDir(), "spool")
	tune := []string{"FILE_BUFFER_FLUSH_MS=50", "FILE_BUFFER_EVENTS_PER_FILE=20", "DB_STATEMENT_TIMEOUT=2000"}
	a := p.start(db, dir, append(tune, "QUEEN_SERVER_ID=attack-holder-a")...)
	p.triedf("second broker started on a live broker's FILE_BUFFER_DIR")
	b := p.launch(db, dir, 0, append(tune, "QUEEN_SERVER_ID=attack-second-b")...)
	urls := []func() string{func() string { return a.url }}
	switch refusedOrServing(p, b) {
	case "refused":
		out := b.tail(2000)
		p.triedf("it exited (%v): %s", b.err, lastLine(out))
		if !strings.Contains(out, strconv.Itoa(a.cmd.Process.Pid)) && !strings.Contains(out, "attack-holder-a") {
			p.failf("the second broker exited (%v) without naming the holder (pid %d or attack-holder-a): %s", b.err, a.cmd.Process.Pid, b.tail(300))
		}
	case "serving":
		p.failf("the second broker started and served /health on a directory a live broker holds")
		urls = append(urls, func() string { return b.url })
	default:
		p.failf("the second broker neither refused nor served within 30 s: %s", b.tail(300))
	}
	p.triedf("PostgreSQL cut for 4 s under 4 pushers (%d broker(s) on the directory)", len(urls))
	stop := make(chan struct{})
	result := p.load(urls, "shared", 4, stop)
	time.Sleep(time.Second)
	proxy.SetMode(faults.Refuse, 0)
	time.Sleep(4 * time.Second)
	proxy.SetMode(faults.Pass, 0)
	time.Sleep(time.Second)
	close(stop)
	acked := result()
	for _, u := range urls {
		if !p.waitSpoolDrained(&broker{url: u()}, 60*time.Second) {
			p.failf("spool of %s not drained within 60 s: %v", u(), p.bufferStatus(u()))
		}
	}
	seen := p.drain(a.url, "shared")
	p.exactlyOnce(acked, seen)
}

// lastLine is the last line of s, cut to 200 bytes.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := lines[len(lines)-1]
	if len(l) > 200 {
		l = l[:200] + "..."
	}
	return l
}

// refusedOrServing waits up to 30 s for b to exit non-zero or to answer
// /health 200.
func refusedOrServing(p *probe, b *broker) string {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b.exited() {
			if b.err == nil {
				return "exited zero"
			}
			return "refused"
		}
		if a := p.do("GET", b.url+"/health", ""); a.code == 200 {
			return "serving"
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "neither"
}

// spoolRecord is one record's place in a spool file.
type spoolRecord struct {
	file          string
	offset        int // of the length prefix
	payload       []byte
	transactionID string
}

// spoolRecords reads every record of the spool files in dir, in name
// order (records: u32 BE length | u32 CRC-32C | payload).
func spoolRecords(dir string) ([]spoolRecord, error) {
	var files []string
	for _, pat := range []string{"*.buf", "*.tmp"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	sort.Strings(files)
	var out []spoolRecord
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for off := 0; off+8 <= len(raw); {
			n := int(binary.BigEndian.Uint32(raw[off:]))
			if off+8+n > len(raw) {
				break
			}
			r := spoolRecord{file: f, offset: off, payload: raw[off+8 : off+8+n]}
			var ev struct {
				TransactionID string `json:"transactionId"`
			}
			_ = json.Unmarshal(r.payload, &ev)
			r.transactionID = ev.TransactionID
			out = append(out, r)
			off += 8 + n
		}
	}
	return out, nil
}

// flipBit flips one bit in the middle of record r's payload on disk.
func flipBit(r spoolRecord) error {
	f, err := os.OpenFile(r.file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	at := int64(r.offset + 8 + len(r.payload)/2)
	b := []byte{r.payload[len(r.payload)/2] ^ 0x10}
	_, err = f.WriteAt(b, at)
	return err
}

// spoolFiles lists the live (not quarantined) spool files in dir.
func spoolFiles(dir string) []string {
	var files []string
	for _, pat := range []string{"*.buf", "*.tmp"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	return files
}

// probeCorruptedSpool (items 2, 13): 50 buffered pushes, one bit flipped in
// record 10, restart with PostgreSQL up: 49 stored, 1 quarantined with a
// reason shown in status/buffers.
func probeCorruptedSpool(p *probe) {
	db, proxy := p.proxied(p.database())
	dir := filepath.Join(p.t.TempDir(), "spool")
	// A long drain cycle keeps the 50 records in one file.
	jwtOn := []string{"JWT_ENABLED=true", "JWT_SECRET=" + jwtSecret}
	asA := tenantBearer("read-write", tenantA)
	b := p.start(db, dir, append(jwtOn, "FILE_BUFFER_FLUSH_MS=600000", "DB_STATEMENT_TIMEOUT=2000")...)
	proxy.SetMode(faults.Refuse, 0)
	for i := 0; i < 50; i++ {
		body := `{"items":[` + item("corrupt", "p", fmt.Sprintf("c%02d", i)) + `]}`
		if a := p.do("POST", b.url+"/api/v1/push", body, asA...); pushStatus(a) != "buffered" {
			p.fatalf("push %d with PostgreSQL unreachable answered %s, want buffered", i, a)
		}
	}
	b.stop()
	recs, err := spoolRecords(dir)
	if err != nil || len(recs) != 50 {
		p.fatalf("spool holds %d records (%v), want 50", len(recs), err)
	}
	victim := recs[9]
	if err := flipBit(victim); err != nil {
		p.fatalf("flip a bit: %v", err)
	}
	p.triedf("tenant A's 50 pushes buffered, one bit flipped in record 10 (%s) of %s, restarted with PostgreSQL up; status/buffers as admin and as tenant B",
		victim.transactionID, filepath.Base(victim.file))
	proxy.SetMode(faults.Pass, 0)
	b = p.start(db, dir, jwtOn...)
	if !eventually(30*time.Second, func() bool { return len(spoolFiles(dir)) == 0 }) {
		p.failf("spool files still there after 30 s: %v", spoolFiles(dir))
	}
	seen := p.drain(b.url, "corrupt", asA...)
	var want []string
	for i := 0; i < 50; i++ {
		if id := fmt.Sprintf("c%02d", i); id != victim.transactionID {
			want = append(want, id)
		}
	}
	missing, repeated := missingOrRepeated(want, seen)
	if len(missing) > 0 || len(repeated) > 0 || len(seen) != 49 {
		p.failf("%d stored, want the 49 intact records once each (missing %s; repeated %s)", len(seen), firstFew(missing), firstFew(repeated))
	}
	p.checkQuarantineReason(b, dir)
	for _, role := range []string{"read-write", "read-only"} {
		a := p.do("GET", b.url+"/api/v1/status/buffers", "", tenantBearer(role, tenantB)...)
		if body := string(a.body); strings.Contains(body, "corrupt") || strings.Contains(body, dir) {
			p.failf("a %s token of tenant B sees tenant A's quarantined record or the spool's path: %s", role, a)
		}
	}
}

// checkQuarantineReason wants the corrupt record kept under failed/ and a
// reason for it in GET /api/v1/status/buffers (read as admin).
func (p *probe) checkQuarantineReason(b *broker, dir string) {
	if kept, _ := os.ReadDir(filepath.Join(dir, "failed")); len(kept) == 0 {
		p.failf("nothing kept under %s/failed: the corrupt record is gone", dir)
	}
	var st struct {
		Quarantined []struct {
			Name    string           `json:"name"`
			Reasons []map[string]any `json:"reasons"`
		} `json:"quarantined"`
	}
	a := p.do("GET", b.url+"/api/v1/status/buffers", "", bearer("admin")...)
	if a.code != 200 || json.Unmarshal(a.body, &st) != nil {
		p.fatalf("status/buffers: %s", a)
	}
	for _, q := range st.Quarantined {
		for _, r := range q.Reasons {
			if reason, _ := r["reason"].(string); reason != "" {
				return
			}
		}
	}
	p.failf("status/buffers shows no quarantined record with a reason: %s", a)
}

// probeSpoolPermissions (item 7): the spool directory is 0700 and its
// files 0600 whatever the umask.
func probeSpoolPermissions(p *probe) {
	db, proxy := p.proxied(p.database())
	dir := filepath.Join(p.t.TempDir(), "spool")
	b := p.start(db, dir, "FILE_BUFFER_FLUSH_MS=600000", "DB_STATEMENT_TIMEOUT=2000")
	proxy.SetMode(faults.Refuse, 0)
	for i := 0; i < 3; i++ {
		if a := p.pushItems(b.url, item("perm", "p", fmt.Sprintf("perm%d", i))); pushStatus(a) != "buffered" {
			p.fatalf("push with PostgreSQL unreachable answered %s, want buffered", a)
		}
	}
	p.triedf("3 pushes buffered; modes of the directory and its files read")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		p.failf("spool directory %s: mode %v (%v), want 0700", dir, modeOf(fi), err)
	}
	files := spoolFiles(dir)
	if len(files) == 0 {
		p.failf("no spool file after 3 buffered pushes")
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			p.failf("spool file %s: mode %v (%v), want 0600", filepath.Base(f), modeOf(fi), err)
		}
	}
	proxy.SetMode(faults.Pass, 0)
}

func modeOf(fi os.FileInfo) string {
	if fi == nil {
		return "?"
	}
	return fmt.Sprintf("%04o", fi.Mode().Perm())
}

// mountTmpfs mounts a small tmpfs on a temporary directory, or says why
// it cannot.
func (p *probe) mountTmpfs(size string) (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("not root, so no mount")
	}
	mnt := p.t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		return "", fmt.Errorf("mount -t tmpfs refused: %v %s", err, strings.TrimSpace(string(out)))
	}
	p.t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	return mnt, nil
}

// readOnly turns dir read-only for every new operation by bind-mounting it
// read-only over itself, as ext4 does after an I/O error (a remount of the
// whole tmpfs is refused while the broker holds a file open for writing);
// the returned func makes it writable again.
func readOnly(dir string) (func() error, error) {
	for _, args := range [][]string{{"--bind", dir, dir}, {"-o", "remount,bind,ro", dir}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			_ = exec.Command("umount", dir).Run()
			return nil, fmt.Errorf("mount %v: %v %s", args, err, strings.TrimSpace(string(out)))
		}
	}
	return func() error {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			return fmt.Errorf("umount %s: %v %s", dir, err, strings.TrimSpace(string(out)))
		}
		return nil
	}, nil
}

// fill writes to dir until the filesystem is full.
func fill(dir string) error {
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

// probeSpoolFilesystem (item 11): with PostgreSQL healthy, a full spool
// filesystem and then a read-only one holding a file to replay must not
// fail pushes nor call the database down.
func probeSpoolFilesystem(p *probe) {
	mnt, err := p.mountTmpfs("4m")
	if err != nil {
		p.skip(err.Error())
	}
	db, proxy := p.proxied(p.database())
	dir := filepath.Join(mnt, "spool")
	b := p.start(db, dir, "DB_STATEMENT_TIMEOUT=2000")
	if err := fill(mnt); err != nil {
		p.fatalf("fill the spool filesystem: %v", err)
	}
	p.triedf("spool filesystem full, PostgreSQL healthy: 10 pushes")
	var want []string
	p.pushExpectQueued(b, "fs", "full", 10, &want)
	_ = os.Remove(filepath.Join(mnt, "filler"))

	proxy.SetMode(faults.Refuse, 0)
	for i := 0; i < 5; i++ {
		txid := fmt.Sprintf("ro-buffered-%d", i)
		if a := p.pushItems(b.url, item("fs", "p", txid)); pushStatus(a) != "buffered" {
			p.fatalf("push with PostgreSQL unreachable answered %s, want buffered", a)
		}
		want = append(want, txid)
	}
	writable, err := readOnly(dir)
	if err != nil {
		p.fatalf("%v", err)
	}
	p.t.Cleanup(func() { _ = writable() })
	proxy.SetMode(faults.Pass, 0)
	p.triedf("5 pushes buffered, spool directory made read-only, PostgreSQL back: status/buffers, 20 pushes, /health")
	// Steady state, not the second after PostgreSQL returns (the drain's
	// probe backs off up to 1.5 s): the broker must come to see the
	// database healthy although the file it replays cannot be deleted.
	if !eventually(15*time.Second, func() bool { return p.bufferStatus(b.url)["dbHealthy"] == true }) {
		p.failf("status/buffers says dbHealthy false 15 s after PostgreSQL came back (the spool is read-only): %v", p.bufferStatus(b.url))
	}
	p.pushExpectQueued(b, "fs", "ro", 20, &want)
	if a := p.do("GET", b.url+"/health", ""); a.code != 200 {
		p.failf("/health with PostgreSQL healthy and a read-only spool: %s", a)
	}
	if err := writable(); err != nil {
		p.fatalf("%v", err)
	}
	drained := p.waitSpoolDrained(b, 30*time.Second) && eventually(30*time.Second, func() bool { return len(spoolFiles(dir)) == 0 })
	if !drained {
		p.failf("spool not drained 30 s after the directory is writable again: %v", p.bufferStatus(b.url))
	}
	seen := p.drain(b.url, "fs")
	if missing, repeated := missingOrRepeated(want, seen); len(missing)+len(repeated) > 0 {
		p.failf("once writable again: missing %s, repeated %s", firstFew(missing), firstFew(repeated))
	}
}

// pushExpectQueued pushes n items, each of which must be stored at once.
func (p *probe) pushExpectQueued(b *broker, queue, prefix string, n int, want *[]string) {
	bad := 0
	for i := 0; i < n; i++ {
		txid := fmt.Sprintf("%s-%d", prefix, i)
		a := p.pushItems(b.url, item(queue, "p", txid))
		if a.code != 201 || pushStatus(a) != "queued" {
			if bad++; bad <= 2 {
				p.failf("push %s with PostgreSQL healthy answered %s, want 201 queued", txid, a)
			}
		}
		if acknowledged(a) {
			*want = append(*want, txid)
		}
	}
}

// probeKillRestart: a broker killed (SIGKILL) while it buffers pushes
// during an outage, restarted on the same directory once PostgreSQL is
// back: it must start (a dead broker holds no lock on the directory) and
// store every push it acknowledged exactly once.
func probeKillRestart(p *probe) {
	db, proxy := p.proxied(p.database())
	dir := filepath.Join(p.t.TempDir(), "spool")
	a := p.start(db, dir, "DB_STATEMENT_TIMEOUT=2000")
	p.triedf("4 pushers; PostgreSQL cut; the broker killed with SIGKILL 2 s into the outage; restarted on its directory with PostgreSQL back")
	stop := make(chan struct{})
	result := p.load([]func() string{func() string { return a.url }}, "k9", 4, stop)
	time.Sleep(time.Second)
	proxy.SetMode(faults.Refuse, 0)
	time.Sleep(2 * time.Second)
	_ = a.cmd.Process.Kill()
	<-a.done
	close(stop)
	acked := result()
	proxy.SetMode(faults.Pass, 0)
	b := p.start(db, dir)
	drained := p.waitSpoolDrained(b, 60*time.Second) && eventually(30*time.Second, func() bool { return len(spoolFiles(dir)) == 0 })
	if !drained {
		p.failf("spool not drained within 60 s of the restart: %v, files %v", p.bufferStatus(b.url), spoolFiles(dir))
	}
	seen := p.drain(b.url, "k9")
	p.exactlyOnce(acked, seen)
}

// exactlyOnce fails the probe unless every acknowledged push was stored
// and delivered once (seen is what a drain of the queue got).
func (p *probe) exactlyOnce(acked []string, seen map[string]int) {
	missing, repeated := missingOrRepeated(acked, seen)
	p.triedf("%d pushes acknowledged, %d distinct stored", len(acked), len(seen))
	if len(missing) > 0 {
		p.failf("%d of %d acknowledged pushes lost: %s", len(missing), len(acked), firstFew(missing))
	}
	if len(repeated) > 0 {
		p.failf("%d delivered more than once: %s", len(repeated), firstFew(repeated))
	}
}
