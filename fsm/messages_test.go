package fsm

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// The event messages read exactly as the fmt formats they replaced.
func TestAttemptMessagesMatchTheirFormats(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		number, node := rapid.IntRange(-2, 1000).Draw(rt, "number"), rapid.StringN(0, 12, -1).Draw(rt, "node")
		score, lease := rapid.Int64().Draw(rt, "score"), rapid.Uint64().Draw(rt, "lease")
		if got, want := reservedMessage(number, node, score, lease), fmt.Sprintf("attempt %d reserved on %s (score %d, lease %d)", number, node, score, lease); got != want {
			rt.Fatalf("reserved: %q, want %q", got, want)
		}
		if got, want := startedMessage(number, node), fmt.Sprintf("attempt %d started on %s", number, node); got != want {
			rt.Fatalf("started: %q, want %q", got, want)
		}
		state := rapid.SampledFrom([]AttemptState{AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost}).Draw(rt, "state")
		errText, code := rapid.SampledFrom([]string{"", "boom"}).Draw(rt, "err"), rapid.IntRange(-1, 255).Draw(rt, "code")
		want := fmt.Sprintf("attempt %d on %s %s", number, node, state)
		if errText != "" {
			want += ": " + errText
		} else if state != AttemptSucceeded {
			want += fmt.Sprintf(" (exit code %d)", code)
		}
		if got := endedMessage(number, node, state, errText, code); got != want {
			rt.Fatalf("ended: %q, want %q", got, want)
		}
	})
}
