import sys, tempfile, time
from pathlib import Path
from harness.launch.launcher import make_launcher
from harness.model import CrashSchedule
from harness.plan.scenario import load_scenario
from harness.run.execution import ExecutionPlan, execute
plan = ExecutionPlan(load_scenario(Path("scenarios/o1001.toml")), CrashSchedule.parse("t6.gateway_accepted"))
launcher = make_launcher("fork")
n = int(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    execute(plan, Path(tmp) / "w", launcher=launcher)
    t = time.process_time(); w = time.perf_counter()
    for i in range(n):
        r = execute(plan, Path(tmp) / f"e{i}", launcher=launcher)
    print("harness cpu ms/exec", (time.process_time() - t) / n * 1000, "wall", (time.perf_counter()-w)/n*1000, r.verdict)
launcher.close()
