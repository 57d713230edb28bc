package gcpace

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		max, want      int
	}{
		{10 * mib, 16 * mib, 100, 100}, // a small heap keeps a given GOGC
		{8 * mib, 16 * mib, MaxPercent, 200},
		{2 * mib, 16 * mib, MaxPercent, MaxPercent}, // a tiny one grows four times itself at most
		{16 * mib, 16 * mib, 100, 100},
		{32 * mib, 16 * mib, 100, 50},
		{40 * mib, 16 * mib, 100, 40},
		{40 * mib, 16 * mib, 30, 30},    // never above the starting GOGC
		{1000 * mib, 16 * mib, 100, 25}, // never below MinPercent
		{1000 * mib, 16 * mib, 10, 10},  // unless GOGC was lower still
		{0, 16 * mib, 100, 100},
	} {
		if got := Percent(c.live, c.headroom, c.max); got != c.want {
			t.Errorf("Percent(%d MiB live, %d MiB headroom, max %d) = %d, want %d", c.live/mib, c.headroom/mib, c.max, got, c.want)
		}
	}
}

// TestPacerFollowsTheLiveHeap keeps 48 MiB live with 16 MiB of headroom:
// after a collection the target drops to what keeps the growth within the
// headroom, and Stop restores the starting GOGC.
func TestPacerFollowsTheLiveHeap(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	p := Start(16 << 20)
	if p == nil {
		t.Fatal("Start with GOGC=100 did not pace")
	}
	defer p.Stop()
	live := make([]byte, 48<<20)
	for i := range live {
		live[i] = byte(i)
	}
	// The finalizer runs after the collection that finds the sentinel,
	// on its own goroutine: collect until it has run, for at most 30 s.
	for deadline := time.Now().Add(30 * time.Second); p.Current() == 100 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	got := p.Current()
	if got >= 100 || got < MinPercent {
		t.Fatalf("with 48 MiB live and 16 MiB of headroom the target is %d, want below 100 and at least %d", got, MinPercent)
	}
	// 16/48 is 33 %; what else the test binary holds raises the live heap a little.
	if got < 30 || got > 33 {
		t.Fatalf("target %d, want about 33 (16 MiB over 48 MiB live)", got)
	}
	if set := debug.SetGCPercent(got); set != got {
		t.Fatalf("the runtime's target is %d, the pacer reports %d", set, got)
	}
	runtime.KeepAlive(live)
	p.Stop()
	if set := debug.SetGCPercent(100); set != 100 {
		t.Fatalf("after Stop the target is %d, want the starting 100", set)
	}
}

func TestStartWithCollectionOff(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	if p := Start(16 << 20); p != nil {
		p.Stop()
		t.Fatal("Start paced a process with collection off")
	}
	var p *Pacer
	p.Stop() // nil: nothing to stop
}

// TestPacerLetsASmallHeapGrowByTheHeadroom: with Go's default GOGC a
// process whose live heap is far below the headroom is collected less
// often, up to MaxPercent; with a GOGC it was given, never above it.
func TestPacerLetsASmallHeapGrowByTheHeadroom(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	for _, given := range []bool{false, true} {
		p := start(64<<20, given)
		if p == nil {
			t.Fatal("start with GOGC=100 did not pace")
		}
		// Collect until the Pacer has followed a collection: the sentinel
		// armed by start is garbage from the first one on, and its
		// finalizer runs on its own goroutine.
		for deadline := time.Now().Add(30 * time.Second); p.paced.Load() == 0 && time.Now().Before(deadline); {
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
		if p.paced.Load() == 0 {
			t.Fatal("the pacer followed no collection in 30 s")
		}
		got := p.Current()
		if !given && got != MaxPercent {
			t.Errorf("Go's default GOGC, a test binary's small heap, 64 MiB of headroom: target %d, want %d", got, MaxPercent)
		}
		if given && got != 100 {
			t.Errorf("a given GOGC of 100: target %d, want 100", got)
		}
		p.Stop()
		if set := debug.SetGCPercent(100); set != 100 {
			t.Fatalf("after Stop the target is %d, want the starting 100", set)
		}
	}
}
