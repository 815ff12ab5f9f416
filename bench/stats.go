package bench

import (
	"math"
	"slices"
	"time"
)

// Distribution summarizes a set of durations, in milliseconds.
type Distribution struct {
	Count  int     `json:"count"`
	MeanMS float64 `json:"meanMs"`
	P50MS  float64 `json:"p50Ms"`
	P95MS  float64 `json:"p95Ms"`
	P99MS  float64 `json:"p99Ms"`
	MaxMS  float64 `json:"maxMs"`
}

// distribution summarizes ds (nearest-rank percentiles). It does not
// modify ds.
func distribution(ds []time.Duration) Distribution {
	if len(ds) == 0 {
		return Distribution{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Distribution{
		Count:  len(s),
		MeanMS: ms(sum / time.Duration(len(s))),
		P50MS:  ms(percentile(s, 0.50)),
		P95MS:  ms(percentile(s, 0.95)),
		P99MS:  ms(percentile(s, 0.99)),
		MaxMS:  ms(s[len(s)-1]),
	}
}

// percentile returns the nearest-rank p-quantile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms converts d to milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// slopePer1000 fits ys (sample i taken at step i+1) with a least-squares
// line and returns its slope in milliseconds per 1000 steps: how much the
// per-step cost grows over a thousand steps of history.
func slopePer1000(ys []time.Duration) float64 {
	n := float64(len(ys))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i, d := range ys {
		x, y := float64(i), float64(d)/float64(time.Millisecond)
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return math.Round((n*sxy-sx*sy)/den*1000*1000) / 1000
}

// windows returns an early window of samples starting at step 10 and the
// last samples, each w long (w = 50, less for short sessions so the two do
// not overlap). Sample i is the overhead between steps i+1 and i+2.
func windows(samples []time.Duration) (early, late []time.Duration, firstEarlyStep int) {
	start, w := windowBounds(len(samples))
	return samples[start : start+w], samples[len(samples)-w:], start + 1
}

// windowBounds returns the index of the early window's first sample and the
// windows' length for n samples.
func windowBounds(n int) (start, w int) {
	w = max(1, min(50, n/4))
	return max(0, min(9, n-2*w)), w
}
