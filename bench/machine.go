package bench

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Machine describes where the figures were measured.
type Machine struct {
	GoVersion string  `json:"goVersion"`
	OS        string  `json:"os"`
	Arch      string  `json:"arch"`
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpuModel,omitempty"`
	MemoryGiB float64 `json:"memoryGiB,omitempty"`
	// Postgres is the server's version string; Settings the settings that
	// bear on commit latency.
	Postgres string            `json:"postgres"`
	Settings map[string]string `json:"settings"`
	// DatabaseHost is the host the pool connects to.
	DatabaseHost string `json:"databaseHost"`
	// PoolMaxConns is the pool size the engine ran with.
	PoolMaxConns int32 `json:"poolMaxConns"`
}

// settingsShown are the server settings a report records.
var settingsShown = []string{"fsync", "synchronous_commit", "wal_sync_method", "shared_buffers", "max_connections"}

func describeMachine(ctx context.Context, pool *pgxpool.Pool) (Machine, error) {
	m := Machine{
		GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
		CPUModel: procField("/proc/cpuinfo", "model name"), Settings: map[string]string{},
		DatabaseHost: pool.Config().ConnConfig.Host, PoolMaxConns: pool.Config().MaxConns,
	}
	if kb, err := strconv.ParseFloat(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 64); err == nil {
		m.MemoryGiB = float64(int(kb/(1<<20)*10+0.5)) / 10
	}
	if err := pool.QueryRow(ctx, `SELECT version()`).Scan(&m.Postgres); err != nil {
		return m, err
	}
	for _, s := range settingsShown {
		var v string
		if err := pool.QueryRow(ctx, `SELECT current_setting($1)`, s).Scan(&v); err != nil {
			return m, err
		}
		m.Settings[s] = v
	}
	return m, nil
}

// procField returns the first value of key in a "key: value" file such as
// /proc/cpuinfo, or "" (on systems without it).
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// CPUProfile is the CPU a phase used, per agent step (or floor sample).
type CPUProfile struct {
	// ClientMSPerStep is this process's CPU time (user and system): the
	// engine, DBOS, pgx and the benchmark's own bookkeeping.
	ClientMSPerStep float64 `json:"clientMsPerStep"`
	// HostMSPerStep is the busy time of all CPUs of the host (Postgres
	// included when it runs here); Linux only.
	HostMSPerStep float64 `json:"hostMsPerStep,omitempty"`
	// HostUtilization is the host's busy fraction of all its CPUs over the
	// phase; Linux only.
	HostUtilization float64 `json:"hostUtilization,omitempty"`
	// PostgresMSPerStep is the CPU time of the Postgres backends serving
	// this database, when the server runs on this host (Linux).
	PostgresMSPerStep float64 `json:"postgresMsPerStep,omitempty"`
	// OtherMSPerStep is the rest of the host's busy time: Postgres's
	// background processes (WAL writer, checkpointer), the kernel's
	// interrupts, and any other load on the machine. A large value means
	// the run was disturbed.
	OtherMSPerStep float64 `json:"otherMsPerStep,omitempty"`
}

type cpuSample struct {
	at       time.Time
	process  time.Duration
	host     time.Duration         // busy time of all CPUs; 0 when unknown
	backends map[int]time.Duration // CPU of this database's backends by pid; nil when unknown
}

// sampleCPU samples this process, the host and, when Postgres runs here,
// the backends of the pool's database.
func sampleCPU(ctx context.Context, pool *pgxpool.Pool) cpuSample {
	return cpuSample{at: time.Now(), process: processCPU(), host: hostBusy(), backends: backendCPU(ctx, pool)}
}

func cpuProfile(before, after cpuSample, n int) CPUProfile {
	if n <= 0 {
		return CPUProfile{}
	}
	perStep := func(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond) / float64(n)) }
	client := after.process - before.process
	p := CPUProfile{ClientMSPerStep: perStep(client)}
	if before.host > 0 && after.host > before.host {
		busy := after.host - before.host
		p.HostMSPerStep = perStep(busy)
		p.HostUtilization = round3(float64(busy) / float64(after.at.Sub(before.at)) / float64(runtime.NumCPU()))
		if before.backends != nil && after.backends != nil {
			var pg time.Duration
			for pid, cpu := range after.backends {
				pg += cpu - before.backends[pid] // a new backend started at 0
			}
			p.PostgresMSPerStep = perStep(pg)
			p.OtherMSPerStep = perStep(max(0, busy-client-pg))
		}
	}
	return p
}

// backendCPU returns the CPU time of the database's client backends, read
// from /proc when the server runs on this host; nil otherwise. A pid is
// trusted only when its command line names this database (a server in a
// container has pids of its own namespace).
func backendCPU(ctx context.Context, pool *pgxpool.Pool) map[int]time.Duration {
	rows, err := pool.Query(ctx, `SELECT pid, current_database() FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		return nil
	}
	type backend struct {
		pid int
		db  string
	}
	var bs []backend
	for rows.Next() {
		var b backend
		if err := rows.Scan(&b.pid, &b.db); err != nil {
			rows.Close()
			return nil
		}
		bs = append(bs, b)
	}
	rows.Close()
	if rows.Err() != nil || len(bs) == 0 {
		return nil
	}
	out := make(map[int]time.Duration, len(bs))
	for _, b := range bs {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(b.pid) + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), " "+b.db+" ") {
			return nil
		}
		cpu, ok := procCPU(b.pid)
		if !ok {
			return nil
		}
		out[b.pid] = cpu
	}
	return out
}

// procCPU reads a process's user and system time from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command may contain spaces: fields start after its ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * (time.Second / 100), true
}

// hostBusy reads the busy time of all CPUs from /proc/stat (Linux); 0
// elsewhere. The kernel reports it in USER_HZ ticks, 100 per second on
// every Linux architecture Go supports.
func hostBusy() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal: idle and iowait are
	// not busy.
	for i, f := range fields[1:min(len(fields), 9)] {
		if i == 3 || i == 4 {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0
		}
		ticks += v
	}
	return time.Duration(ticks) * (time.Second / 100)
}
