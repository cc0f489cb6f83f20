import sys, time, shutil, resource, random, statistics, os
from pathlib import Path
sys.path.insert(0, '.')
from bench.bench_flat import copy_home, as_served
from amacs_server.persistence import history
def cpu():
    a=resource.getrusage(resource.RUSAGE_SELF); b=resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime+a.ru_stime+b.ru_utime+b.ru_stime
homes={}
for size in (1000, 20000):
    tmp = Path('/tmp/lead-bf/h%d' % size); shutil.rmtree(tmp, ignore_errors=True); tmp.mkdir()
    copy_home(Path(f'/work/bench-homes/flat/home-{size}'), tmp/'served'); as_served(tmp/'served')
    homes[size]=tmp
    last=history.last_tick(tmp/'served'); history.fork(tmp/'served', last-1, tmp/'f'); shutil.rmtree(tmp/'f')
rng=random.Random(3); res={1000:([],[]),20000:([],[])}
print('load', os.getloadavg())
for r in range(int(sys.argv[1])):
    for size,tmp in homes.items():
        last=history.last_tick(tmp/'served')
        c=cpu(); t=time.perf_counter()
        history.fork(tmp/'served', last-rng.randint(1,200), tmp/'f')
        res[size][0].append((time.perf_counter()-t)*1000); res[size][1].append((cpu()-c)*1000); shutil.rmtree(tmp/'f')
print('load', os.getloadavg())
def q(v): v=sorted(v); return '%.0f / %.0f' % (statistics.median(v), v[int(0.9*(len(v)-1))])
for size,(w,c) in res.items(): print(size, 'n', len(w), 'wall', q(w), 'cpu', q(c))
print('ratio wall %.2f cpu %.2f' % (statistics.median(res[20000][0])/statistics.median(res[1000][0]), statistics.median(res[20000][1])/statistics.median(res[1000][1])))
for tmp in homes.values(): shutil.rmtree(tmp)
