import torch

from fedpub.config import ModelAverageConfig
from fedpub.model_average import averaged_params, init_average, update_average


def test_all_is_the_mean_of_every_rounds_model():
    """PDA-DPMD's Algorithm 1 returns the average of θ_1..θ_T: kept as a running mean, equal to the plain mean."""
    models = [{"w": torch.tensor([float(t), 2.0 * t])} for t in range(1, 8)]
    state = init_average()
    for params in models:
        state = update_average(ModelAverageConfig(kind="all"), state, params)
    torch.testing.assert_close(averaged_params(state)["w"], torch.stack([m["w"] for m in models]).mean(0))
    assert state["count"] == 7
