package tokenize

import (
	"slices"
	"testing"
)

func TestChatNextTurnExtendsPrevious(t *testing.T) {
	turn1 := Chat([]Message{{"user", "plan a trip"}})
	prev := append(slices.Clone(turn1), OutputIDs(3)...)
	turn2 := Chat([]Message{{"user", "plan a trip"}, {"assistant", Output(3)}, {"user", "and pack"}})
	if len(turn1) != 5 || len(turn2) != 5+3+1+2+1 {
		t.Fatalf("lengths %d %d", len(turn1), len(turn2))
	}
	if !slices.Equal(turn2[:len(prev)], prev) {
		t.Fatal("turn 2's prompt does not start with turn 1's prompt and answer")
	}
}

func TestOutput(t *testing.T) {
	tests := []struct {
		n    int
		want string
	}{{0, ""}, {1, "tok0 "}, {12, "tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 tok9 tok10 tok11 "}}
	for _, tt := range tests {
		if got := Output(tt.n); got != tt.want {
			t.Errorf("Output(%d) = %q", tt.n, got)
		}
		if got := Append(nil, tt.want); !slices.Equal(got, OutputIDs(tt.n)) {
			t.Errorf("OutputIDs(%d) differ from the tokens of Output", tt.n)
		}
	}
	if Count(" a  b\tc\n") != 3 {
		t.Error("Count")
	}
}
