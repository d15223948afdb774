import pytest
import torch

import bench_model
import step_work
from vllm_dualpath.calibrate import SHAPES

BY_NAME = {s.name: s for s in SHAPES}
LAYERS = [BY_NAME[name] for name in ("qkv_proj", "o_proj", "shared_gate_up", "shared_down")]


def test_allreduce_time_is_the_tensor_once_over_the_link() -> None:
    # 1024 rows of 5120 BF16 values are 10,485,760 bytes; at 100 GB/s that is 104.86 us.
    assert step_work.allreduce_us(1024, 100.0, 5120) == pytest.approx(104.8576)
    assert step_work.allreduce_us(2048, 100.0, 5120) == pytest.approx(2 * 104.8576)
    assert step_work.allreduce_us(1024, 50.0, hidden=2560) == pytest.approx(104.8576)


@pytest.mark.parametrize(("m", "link_gbs"), [(0, 100.0), (8, 0.0), (8, -1.0)])
def test_allreduce_time_refuses_what_has_none(m, link_gbs) -> None:
    with pytest.raises(ValueError, match="positive link bandwidth"):
        step_work.allreduce_us(m, link_gbs, 5120)


def test_link_wait_rounds_to_whole_16_ns_steps() -> None:
    assert step_work.LinkWait(52.4288).duration_ns == 52432
    assert step_work.LinkWait(0.0).duration_ns == 16


def _work(link_gbs):
    generator = torch.Generator().manual_seed(0)
    return step_work.decoder_work(LAYERS * 2, 8, link_gbs, generator, torch.device("cpu"))


def test_decoder_work_follows_each_layer_as_in_a_decoder_layer() -> None:
    work = _work(100.0)
    assert sorted(work) == list(range(8))
    attention = work[0]()
    assert attention.shape == (1, 48, 8, 128)  # o_proj's 6144 inputs: 48 heads of 128
    assert work[2]().shape == (8, 768)  # shared_down's inputs
    for index in (1, 3, 5, 7):
        assert isinstance(work[index], step_work.LinkWait)
        assert work[index].duration_ns == 816  # 8 x 5120 x 2 bytes at 100 GB/s = 0.82 us
    assert work[4] is work[0] and work[6] is work[2]


def test_decoder_work_without_a_link_has_no_wait() -> None:
    work = _work(None)
    assert sorted(work) == [0, 2, 4, 6]


def test_decoder_work_refuses_an_unknown_layer() -> None:
    with pytest.raises(ValueError, match="lm_head"):
        step_work.decoder_work(
            [BY_NAME["lm_head"]], 8, None, torch.Generator(), torch.device("cpu")
        )


def test_decoder_work_needs_every_layer_of_a_decoder_layer() -> None:
    with pytest.raises(ValueError, match="needs each of"):
        step_work.decoder_work(LAYERS[:3], 8, None, torch.Generator(), torch.device("cpu"))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--link-gbs", "200"], "--link-gbs needs --step decoder"),
        (["--step", "decoder", "--link-gbs", "0"], "positive bandwidth"),
        (["--m", "1024,lots"], "comma-separated whole numbers"),
        (["--m", "0"], "at least 1"),
    ],
)
def test_model_benchmark_refuses_bad_arguments_before_looking_for_a_gpu(
    tmp_path, arguments, message
) -> None:
    with pytest.raises(SystemExit, match=message):
        bench_model.main(["--out", str(tmp_path / "model.json"), *arguments])
    assert not (tmp_path / "model.json").exists()
