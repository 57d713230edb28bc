//go:build unix

package cputime

import (
	"os/exec"
	"testing"
	"time"
)

// TestSelfAndChildrenGrow checks that work done here raises Self and that
// a reaped child's work raises Children.
func TestSelfAndChildrenGrow(t *testing.T) {
	self0 := Self()
	for deadline := time.Now().Add(5 * time.Second); Self() == self0; {
		if time.Now().After(deadline) {
			t.Fatal("Self did not move while this process spun")
		}
		spin()
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run as a child:", err)
	}
	child0 := Children()
	for i := 0; Children() == child0; i++ {
		if i == 50 {
			t.Fatalf("Children stayed %v after %d busy children were reaped", child0, i)
		}
		if out, err := exec.Command(sh, "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done").CombinedOutput(); err != nil {
			t.Fatalf("child: %v: %s", err, out)
		}
	}
}

var sink int

func spin() {
	for i := 0; i < 1_000_000; i++ {
		sink += i
	}
}
