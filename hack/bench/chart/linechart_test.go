package main

import (
	"reflect"
	"testing"
)

func TestSteps(t *testing.T) {
	tests := []struct {
		name string
		in   [][2]float64
		want [][2]float64
	}{
		{name: "no polls", in: nil, want: nil},
		{name: "one poll", in: [][2]float64{{1, 3}}, want: [][2]float64{{1, 3}}},
		{
			name: "a count holds until the poll that read the next",
			in:   [][2]float64{{1, 3}, {2, 5}, {3, 6}},
			want: [][2]float64{{1, 3}, {2, 3}, {2, 5}, {3, 5}, {3, 6}},
		},
		{
			name: "equal counts need only their ends",
			in:   [][2]float64{{1, 3}, {2, 3}, {3, 3}, {4, 4}, {5, 4}},
			want: [][2]float64{{1, 3}, {4, 3}, {4, 4}, {5, 4}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := steps(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("steps(%v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestReadyPoints(t *testing.T) {
	in := []sample{{0.5, 0, 0, 0}, {1.5, 1, notRead, notRead}, {2.5, notRead, 3, 3}}
	want := [][2]float64{{0.5, 0}, {2.5, 3}}
	if got := readyPoints(in); !reflect.DeepEqual(got, want) {
		t.Errorf("readyPoints = %v, want %v", got, want)
	}
}

func TestWrap(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		width float64
		want  []string
	}{
		{"fits", "the floor", 200, []string{"the floor"}},
		// 13 px: about 7.3 px a letter, so 60 px hold 8 letters.
		{"breaks between words", "the same nodes joined", 60, []string{"the same", "nodes", "joined"}},
		{"a word wider than the line has a line of its own", "controllers", 20, []string{"controllers"}},
		{"empty", "", 100, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wrap(tt.text, tt.width, smallSize); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("wrap(%q, %v) = %q, want %q", tt.text, tt.width, got, tt.want)
			}
		})
	}
}
