package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// events builds a test2json stream from "action package test [output]" lines.
func events(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		f := strings.SplitN(l, " ", 4)
		for len(f) < 4 {
			f = append(f, "")
		}
		if f[2] == "-" {
			f[2] = ""
		}
		b.WriteString(`{"Action":"` + f[0] + `","Package":"` + f[1] + `","Test":"` + f[2] + `","Output":"` + f[3] + `\n"}` + "\n")
	}
	return b.String()
}

func TestReadRunListsLeafFailuresAndBrokenPackages(t *testing.T) {
	in := "gotestsum noise\n" + events(
		"output p/a TestA/sub boom",
		"fail p/a TestA/sub",
		"fail p/a TestA",
		"pass p/a TestB",
		"fail p/a -",
		"output p/b - panic: test timed out",
		"fail p/b -",
		"pass p/c TestC",
	)
	r, err := readRun("load-2", strings.NewReader(in))
	require.NoError(t, err)
	require.Equal(t, "load", r.Mode)
	require.Equal(t, 2, r.Passed)
	require.Len(t, r.Failures, 2)
	require.Equal(t, "p/a TestA/sub", r.Failures[0].Key, "the failing subtest, not its parent")
	require.Equal(t, "boom", r.Failures[0].Output)
	require.Equal(t, "p/b (package)", r.Failures[1].Key, "a package that failed outside any test")
	require.Contains(t, r.Failures[1].Output, "timed out")
}

func TestReportCountsFailuresPerModeAndKeepsTheFirstOutput(t *testing.T) {
	var runs []runResult
	for _, name := range []string{"quiet-1", "quiet-2", "load-1", "load-2"} {
		lines := []string{"pass p TestOK"}
		if name != "quiet-1" {
			lines = append(lines, "output p TestFlaky out of "+name, "fail p TestFlaky")
		}
		r, err := readRun(name, strings.NewReader(events(lines...)))
		require.NoError(t, err)
		runs = append(runs, r)
	}
	var out strings.Builder
	require.Equal(t, 1, report(&out, runs))
	s := out.String()
	require.Contains(t, s, "4 runs (quiet 2, load 2), 3 with failures, 1 failing tests")
	require.Contains(t, s, "FAIL 3/4 (quiet 1/2, load 2/2)  p TestFlaky")
	require.Contains(t, s, "first failure, run quiet-2:\n  | out of quiet-2\n")

	out.Reset()
	require.Zero(t, report(&out, runs[:1]))
	require.Contains(t, out.String(), "1 runs (quiet 1), 0 with failures, 0 failing tests")
}
