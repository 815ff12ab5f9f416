// Command stresssum summarises the test runs of scripts/stress.sh: it reads
// the `go test -json` event files of the runs (one file per run, named
// <mode>-<n>.json, mode "quiet" or "load") and prints, for each test that
// ever failed, how often (per mode) and the output of its first failure.
//
//	go run ./internal/stresssum /tmp/helix-stress/*.json
//
// A failing test whose subtests failed in the same run is not listed: its
// failing subtests are. A package that failed with no failing test (a
// build error, a panic outside a test, a timeout, TestMain) is listed as
// the package. The exit status is 1 when anything failed, 2 on bad input.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// maxOutputLines bounds the first failure's output in the summary; the
// run's own log has all of it.
const maxOutputLines = 80

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: stresssum RUN.json... (files written by scripts/stress.sh)")
		os.Exit(2)
	}
	var runs []runResult
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "stresssum: %v\n", err)
			os.Exit(2)
		}
		r, err := readRun(runName(path), f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "stresssum: %s: %v\n", path, err)
			os.Exit(2)
		}
		runs = append(runs, r)
	}
	if failed := report(os.Stdout, runs); failed > 0 {
		os.Exit(1)
	}
}

// runName is a run's label: its file name without the extension.
func runName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
}

// event is the part of a test2json event the summary reads.
type event struct {
	Action  string `json:"Action"`
	Package string `json:"Package"`
	Test    string `json:"Test"`
	Output  string `json:"Output"`
}

// runResult is one run: its label, mode, how many tests passed and failed,
// and the failures with their output.
type runResult struct {
	Name     string
	Mode     string
	Passed   int
	Failures []failure
}

// failure is one failed test (or package) of one run.
type failure struct {
	Key    string // "package Test/Sub", or "package (package)"
	Output string
}

// readRun reads one run's events.
func readRun(name string, r io.Reader) (runResult, error) {
	res := runResult{Name: name, Mode: strings.SplitN(name, "-", 2)[0]}
	output := map[string]*strings.Builder{}
	failedTests := map[string]bool{} // package + " " + test
	failedPkgs := map[string]bool{}  // packages whose own event failed
	pkgHasFailedTest := map[string]bool{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // gotestsum and go test may interleave plain lines
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return res, fmt.Errorf("decode %q: %w", line, err)
		}
		key := e.Package + " " + e.Test
		if e.Test == "" {
			key = e.Package + " (package)"
		}
		switch e.Action {
		case "output":
			b, ok := output[key]
			if !ok {
				b = &strings.Builder{}
				output[key] = b
			}
			b.WriteString(e.Output)
		case "pass":
			if e.Test != "" {
				res.Passed++
			}
		case "fail":
			if e.Test == "" {
				failedPkgs[e.Package] = true
				continue
			}
			if !failedTests[key] {
				order = append(order, key)
			}
			failedTests[key] = true
			pkgHasFailedTest[e.Package] = true
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	for _, key := range order {
		if hasFailedSubtest(key, failedTests) {
			continue
		}
		res.Failures = append(res.Failures, failure{Key: key, Output: outputOf(output[key])})
	}
	pkgs := make([]string, 0, len(failedPkgs))
	for p := range failedPkgs {
		if !pkgHasFailedTest[p] {
			pkgs = append(pkgs, p)
		}
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		key := p + " (package)"
		res.Failures = append(res.Failures, failure{Key: key, Output: outputOf(output[key])})
	}
	return res, nil
}

// hasFailedSubtest tells whether a failed test of the run is a subtest of key.
func hasFailedSubtest(key string, failed map[string]bool) bool {
	for k := range failed {
		if strings.HasPrefix(k, key+"/") {
			return true
		}
	}
	return false
}

func outputOf(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > maxOutputLines {
		lines = append(lines[:maxOutputLines], fmt.Sprintf("... (%d more lines in the run's log)", len(lines)-maxOutputLines))
	}
	return strings.Join(lines, "\n")
}

// report prints the summary and returns the number of failing tests.
func report(w io.Writer, runs []runResult) int {
	type stat struct {
		key       string
		byMode    map[string]int
		total     int
		firstRun  string
		firstText string
	}
	modeRuns := map[string]int{}
	var modes []string
	stats := map[string]*stat{}
	var keys []string
	failedRuns := 0
	for _, r := range runs {
		if modeRuns[r.Mode] == 0 {
			modes = append(modes, r.Mode)
		}
		modeRuns[r.Mode]++
		if len(r.Failures) > 0 {
			failedRuns++
		}
		for _, f := range r.Failures {
			s, ok := stats[f.Key]
			if !ok {
				s = &stat{key: f.Key, byMode: map[string]int{}, firstRun: r.Name, firstText: f.Output}
				stats[f.Key] = s
				keys = append(keys, f.Key)
			}
			s.byMode[r.Mode]++
			s.total++
		}
	}
	parts := make([]string, len(modes))
	for i, m := range modes {
		parts[i] = fmt.Sprintf("%s %d", m, modeRuns[m])
	}
	fmt.Fprintf(w, "stress summary: %d runs (%s), %d with failures, %d failing tests\n",
		len(runs), strings.Join(parts, ", "), failedRuns, len(keys))
	for _, r := range runs {
		fmt.Fprintf(w, "  run %-8s tests passed %d, failed %d\n", r.Name, r.Passed, len(r.Failures))
	}
	sort.SliceStable(keys, func(i, j int) bool { return stats[keys[i]].total > stats[keys[j]].total })
	for _, k := range keys {
		s := stats[k]
		per := make([]string, len(modes))
		for i, m := range modes {
			per[i] = fmt.Sprintf("%s %d/%d", m, s.byMode[m], modeRuns[m])
		}
		fmt.Fprintf(w, "\nFAIL %d/%d (%s)  %s\n  first failure, run %s:\n", s.total, len(runs), strings.Join(per, ", "), k, s.firstRun)
		for _, line := range strings.Split(s.firstText, "\n") {
			fmt.Fprintf(w, "  | %s\n", line)
		}
	}
	return len(keys)
}
