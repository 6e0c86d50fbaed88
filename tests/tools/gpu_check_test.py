#!/usr/bin/env python3
"""scripts/gpu-check.sh's checks (benchmarks/gpu_check/checks.py) on reports dpbench
writes here: DataParallel and pipeline runs on CPU devices, and a run's report given each
timing source's name. Run by CTest with DPBENCH set to the build's dpbench."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gpu_check"))
import checks  # noqa: E402

DPBENCH = os.environ.get("DPBENCH", os.path.join(ROOT, "build", "benchmarks", "dpbench", "dpbench"))


def dpbench(out, *flags):
    subprocess.run([DPBENCH, *flags, "--threads=1", "--steps=4", "--warmup=1", "--progress=none", f"--json={out}"],
                   check=True, stdout=subprocess.DEVNULL)


class GpuCheckSummary(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dpb_gpucheck_")
        dpbench(os.path.join(cls.dir, "dp-lenet.json"), "--mode=dp", "--gpus=2", "--model=lenet", "--batch=32")
        dpbench(os.path.join(cls.dir, "mp-mlp.json"), "--mode=mp", "--gpus=2", "--model=mlp", "--batch=64",
                "--schedule=gpipe", "--micro-batches=4")
        dpbench(os.path.join(cls.dir, "single-off.json"), "--mode=single", "--model=mlp", "--batch=64",
                "--device-timing=off")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def test_the_dp_split_and_the_pipelines_stages_pass_on_real_runs(self):
        lines = checks.splits(self.dir)
        self.assertEqual(len([l for l in lines if "dp-lenet" in l]), 1, lines)
        self.assertEqual(len([l for l in lines if "mp-mlp" in l]), 1, lines)
        for line in lines:
            self.assertTrue(line.startswith("- [pass]"), line)

    def sources_of(self, named):
        """The single run's report given to each --device-timing as if it had named
        `named[t]` and taken `scale[t]` x its step."""
        d = tempfile.mkdtemp(dir=self.dir)
        with open(os.path.join(self.dir, "single-off.json")) as f:
            report = json.load(f)
        self.assertEqual(report["runs"][0]["timeline"]["source"], "host")
        for t, (source, scale) in named.items():
            r = json.loads(json.dumps(report))
            r["runs"][0]["timeline"]["source"] = source
            r["runs"][0]["step_time_s"]["median"] *= scale
            with open(os.path.join(d, f"single-{t}.json"), "w") as f:
                json.dump(r, f)
        return checks.sources(d)

    def test_each_timing_source_is_named_and_cupti_costs_at_most_three_percent(self):
        good = {"auto": ("cupti", 1.01), "cupti": ("cupti", 1.02), "events": ("cuda-events", 1.01), "off": ("host", 1)}
        lines = self.sources_of(good)
        self.assertEqual(len(lines), 1)
        self.assertTrue(lines[0].startswith("- [pass] single:"), lines)
        self.assertIn("cupti +2.0%", lines[0])
        # CUPTI 5 % slower than no timing: over the target.
        slow = dict(good, cupti=("cupti", 1.05))
        self.assertTrue(self.sources_of(slow)[0].startswith("- [FAIL]"))
        # events that fell back to the host's clock: named wrong.
        wrong = dict(good, events=("host", 1.0))
        line = self.sources_of(wrong)[0]
        self.assertTrue(line.startswith("- [FAIL]"), line)
        self.assertIn("wrong source ['events: host']", line)
        # A source whose run wrote no report.
        missing = {t: v for t, v in good.items() if t != "events"}
        line = self.sources_of(missing)[0]
        self.assertTrue(line.startswith("- [FAIL]"), line)
        self.assertIn("no report for ['events']", line)

    def test_the_longest_kernel_and_ncus_time_for_it(self):
        report = os.path.join(self.dir, "kernels.json")
        with open(os.path.join(self.dir, "single-off.json")) as f:
            r = json.load(f)
        r["runs"][0]["timeline"]["intervals"] = [
            {"lane": "gpu stream 7", "cat": "compute", "name": "sgemm", "begin_s": 0.0, "end_s": 100e-6},
            {"lane": "gpu stream 7", "cat": "compute", "name": "sgemm", "begin_s": 1.0, "end_s": 1.0 + 110e-6},
            {"lane": "gpu stream 7", "cat": "compute", "name": "relu", "begin_s": 2.0, "end_s": 2.0 + 150e-6},
            {"lane": "cpu", "cat": "compute", "name": "host", "begin_s": 0.0, "end_s": 1.0},
        ]
        with open(report, "w") as f:
            json.dump(r, f)
        name, median_us = checks.longest_kernel(report)
        self.assertEqual(name, "sgemm")  # 210 us in all against relu's 150
        self.assertAlmostEqual(median_us, 105.0, places=6)
        self.assertIsNone(checks.longest_kernel(os.path.join(self.dir, "single-off.json")))
        # ncu --csv --metrics gpu__time_duration.sum: one row a launch.
        csv_path = os.path.join(self.dir, "ncu.csv")
        with open(csv_path, "w") as f:
            f.write("==PROF== Connected to process 1234\n")
            f.write('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
                    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')
            for i, (unit, value) in enumerate([("usecond", "104.10"), ("nsecond", "106,200"), ("usecond", "105.00")]):
                f.write(f'"{i}","1234","dpbench","127.0.0.1","sgemm","1","7","(256, 1, 1)","(80, 1, 1)","0","9.0",'
                        f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"\n')
        self.assertEqual(checks.ncu_time_us(csv_path), (105.0, 3))
        self.assertTrue(checks.ncu_compare(csv_path, 105.0, "sgemm")[0].startswith("- [pass]"))
        self.assertTrue(checks.ncu_compare(csv_path, 120.0, "sgemm")[0].startswith("- [FAIL]"))

    def test_the_command_line(self):
        script = os.path.join(ROOT, "benchmarks", "gpu_check", "checks.py")
        out = subprocess.run([sys.executable, script, "splits", self.dir], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("- [pass] dp-lenet", out.stdout)
        bad = subprocess.run([sys.executable, script, "nothing"], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("checks.py sources DIR", bad.stderr)


if __name__ == "__main__":
    unittest.main()
