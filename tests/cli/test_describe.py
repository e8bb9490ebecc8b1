"""cli/describe.py: the lines `quail worker status` writes for a worker, its jobs and each worker's load."""

from quail.cli.describe import describe_job, describe_load, describe_worker, whole_table

GIB = 1 << 30
INFO = {"model": "smollm2-135m", "dtype": "float32", "dtype_why": "given", "attention": "torch",
        "attention_why": "no kernel for float32", "device": "cpu", "arena_pages": 256, "free_pages": 200,
        "retained_pages": 56, "max_batch_tokens": 2048, "memory": None, "cascade_models": [],
        "answer_store": "/tmp/answers.sqlite", "weights_loaded": True}
JOB = {"ref": "0123456789abcdef", "origin": {"dag_id": "news", "run_id": "r1", "task_id": "sport"},
       "state": "running", "rows_done": 30, "rows": 100, "tokens_per_second": 1234.5, "tokens_computed": 5000,
       "stats": None, "table_rows": None, "first_row": 0, "eta_seconds": None}


def test_a_worker_is_its_model_device_arena_and_store():
    assert describe_worker(INFO) == (
        "smollm2-135m (float32: given; attention torch: no kernel for float32) on cpu: arena 256 pages, "
        "200 free, 56 retained; 2,048 tokens a pass; answers in /tmp/answers.sqlite")
    memory = {"device": "cuda:0", "memory_free": 70 * GIB, "memory_total": 80 * GIB, "weights_bytes": 3 * GIB,
              "reserve_bytes": GIB // 2, "rule": "90% of free memory less the reserve"}
    line = describe_worker({**INFO, "memory": memory, "dtype_why": None, "answer_store": None,
                            "cascade_models": ["qwen2.5-coder-1.5b"]})
    assert "(float32: given;" in line and "answers in no store" in line
    assert ("on cuda:0: 70.0 of 80.0 GiB free after 3.00 GiB of weights, reserve 0.50 GiB; arena 256 pages "
            "(90% of free memory less the reserve)") in line
    assert line.endswith("; cascade models loaded: qwen2.5-coder-1.5b")
    assert "no kernel for float32; weights not read yet: at the first job that computes) on cpu" in describe_worker(
        {**INFO, "weights_loaded": False})


def test_a_job_is_whose_it_is_and_how_far_it_got():
    assert describe_job(JOB) == "0123456789ab  news/r1/sport  running   30/100 rows  1,234 tok/s  computed 5,000"
    done = {**JOB, "state": "done", "rows_done": 100, "stats": {"tokens_computed": 7000}}
    assert describe_job(done).endswith("done      100/100 rows  1,234 tok/s  computed 7,000")


def test_a_windows_job_says_where_it_stands_in_the_whole_table():
    assert whole_table(JOB) == ""
    window = {**JOB, "table_rows": 1000, "first_row": 400}
    assert whole_table(window) == "  table: 430/1,000 rows (43%)"
    assert whole_table({**window, "eta_seconds": 61.4}) == "  table: 430/1,000 rows (43%), about 61 s left"
    assert describe_job(window).endswith("computed 5,000  table: 430/1,000 rows (43%)")


def test_a_worker_that_does_not_answer_is_a_line_not_an_error(tmp_path):
    line = describe_load(f"grpc+unix://{tmp_path}/none.sock", None)
    assert line.startswith(f"grpc+unix://{tmp_path}/none.sock  does not answer: no Quail worker answers at ")
