# Summarizes the peers runner's RESULT lines (stdin): sequential, concurrent and HITL figures.
import sys,json
for l in sys.stdin:
  if not l.startswith('RESULT'): continue
  d=json.loads(l[7:])
  if d['test']=='seq': print('seq p50',d['per_step_ms']['p50'],'p95',d['per_step_ms']['p95'],'B/step',d['storage']['bytes_per_step'],'WAL',d['wal']['wal_bytes_per_step'],'xacts',d['wal']['write_xacts_per_step'],'growth',d['growth'])
  if d['test']=='conc': print('conc',d['steps_per_s'])
  if d['test']=='hitl': print('hitl p50',d['resume_to_next_interrupt_ms']['p50'],'p95',d['resume_to_next_interrupt_ms']['p95'],'send',d['send_call_ms']['p50'])
