"""A table of examples with a user column (issue 37.2, 37.5): a Hugging Face dataset written offline in FEMNIST's
schema (flwrlabs/femnist: image, writer_id, hsf_id, character) partitioned by writer_id, and a Parquet table, read
lazily as users; DOPE runs on them in process and on Flower simulation; a bad column is refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

import fedpub
from fedpub.config import dump_config, load_config
from fedpub.data.base import DatasetError
from fedpub.data.users import load_data, open_splits
from fedpub.simulations.configs import quickstart_config_path
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.flower.server_app import simulated_nodes
from fedpub.simulations.flower.simulation import run_flower_simulation
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config

datasets = pytest.importorskip("datasets")  # the `hf` extra (in `test`)

WRITERS = 12


def _femnist_rows(seed: int = 0) -> dict[str, list[Any]]:
    """Rows in flwrlabs/femnist's schema: 4 to 9 characters per writer, images of 8-bit levels."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[Any]] = {"image": [], "writer_id": [], "hsf_id": [], "character": []}
    for w in range(WRITERS):
        for _ in range(4 + w % 6):
            rows["image"].append(rng.integers(0, 256, (28, 28), dtype=np.uint8))
            rows["writer_id"].append(f"f{w:04d}_{w % 90:02d}")
            rows["hsf_id"].append(w % 8)
            rows["character"].append(int(rng.integers(0, 62)))
    return rows


@pytest.fixture(scope="module")
def femnist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image

    rows = _femnist_rows()
    rows["image"] = [Image.fromarray(a, mode="L") for a in rows["image"]]
    features = datasets.Features({"image": datasets.Image(), "writer_id": datasets.Value("string"),
                                  "hsf_id": datasets.Value("int64"), "character": datasets.ClassLabel(num_classes=62)})
    path = tmp_path_factory.mktemp("femnist_hf")
    datasets.Dataset.from_dict(rows, features=features).shuffle(seed=0).save_to_disk(str(path))
    return path


def _femnist_config(path: Path, out: Path, **overrides: Any) -> Any:
    """The bundled femnist_hf.yaml on the offline copy, small."""
    raw = yaml.safe_load(dump_config(load_config(quickstart_config_path().parent / "femnist_hf.yaml")))
    raw["data"] |= {"path": str(path), "table": {**raw["data"]["table"], "hub": None},
                    "public": {"fraction": 0.25, "seed": 0}, "eval_clients": 4}
    base = tiny_config(Path("unused"), out).model_dump(mode="json")
    raw |= {k: base[k] for k in ("name", "rounds", "eval_every", "checkpoint_every", "output_dir", "device", "client")}
    raw["strategy"] |= {"target_epsilon": None, "noise_multiplier": 0.8, "public_clients_per_round": 2,
                        "sampling": {"kind": "poisson", "clients_per_round": 4}}
    raw["strategy"] = {k: v for k, v in raw["strategy"].items() if v is not None}
    return fedpub.parse_config({**raw, **overrides})


def test_a_hugging_face_dataset_is_read_as_one_user_per_writer_id(femnist_dir, tmp_path):
    config = _femnist_config(femnist_dir, tmp_path)
    data = load_data(config)
    rows = _femnist_rows()
    writers = sorted(set(rows["writer_id"]))
    assert data.train.client_ids == writers and data.train.num_classes == 62
    assert len(data.public_ids) == 3 and not set(data.public_ids) & set(data.private_ids)
    writer = writers[5]
    mine = [i for i, w in enumerate(rows["writer_id"]) if w == writer]
    user = data.train.client_data(writer)
    assert data.train.num_examples(writer) == len(mine) == len(user)
    assert user.x.shape == (len(mine), 1, 28, 28) and user.x.dtype == torch.float32
    # the rows were shuffled before saving: the user's rows are found by the index, in their stored order
    expected = {(rows["character"][i], rows["image"][i].tobytes()) for i in mine}
    got = {(int(y), (x[0].numpy() * 255).round().astype(np.uint8).tobytes()) for x, y in zip(user.x, user.y)}
    assert got == expected


def test_dope_on_the_bundled_femnist_config_runs_in_process(femnist_dir, tmp_path):
    result = fedpub.run(_femnist_config(femnist_dir, tmp_path), output_dir=None)
    assert result.rounds_done == 3 and result.epsilon > 0 and "eval_accuracy" in result.final_metrics
    assert result.model(torch.zeros(2, 1, 28, 28)).shape == (2, 62)


@pytest.mark.slow
@pytest.mark.extended  # the same data and model in process stay in the suite
def test_dope_on_a_hugging_face_dataset_and_a_test_files_model_on_flower_gives_the_in_process_model_and_ledger(
        femnist_dir, tmp_path, one_torch_thread):
    flower = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}
    own = {"factory": "tests.simulations.test_own_model_and_data:make_model", "kwargs": {"hidden": 8}}  # Ray's too
    local_cfg = _femnist_config(femnist_dir, tmp_path / "inprocess", flower=flower, model=own)
    flower_cfg = _femnist_config(femnist_dir, tmp_path / "flower", flower=flower, model=own)
    local = run_in_process(build_experiment(local_cfg), RunDirectory(local_cfg.output_dir / local_cfg.name))
    remote = run_flower_simulation(flower_cfg, simulated_nodes(build_experiment(flower_cfg)))
    assert remote.rounds_done == local.rounds_done == 3
    for k in local.params:
        torch.testing.assert_close(remote.params[k], local.params[k], rtol=1e-5, atol=1e-6)
    ledgers = [json.loads((c.output_dir / c.name / "ledger.json").read_text()) for c in (local_cfg, flower_cfg)]
    assert ledgers[0] == ledgers[1]


def _parquet(path: Path, users: int = 10) -> Path:
    rng = np.random.default_rng(1)
    user = [f"u{u}" for u in range(users) for _ in range(3 + u % 4)]
    x = rng.normal(size=(len(user), 28 * 28)).astype(np.float32)
    table = pa.table({"uid": user, "pixels": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 28 * 28),
                      "label": rng.integers(0, 62, len(user))})
    pq.write_table(table, path / "part-0.parquet")
    return path


def test_a_parquet_table_with_a_user_column_trains_with_dope(tmp_path):
    data = {"source": "table", "path": str(_parquet(tmp_path)), "table": {"user": "uid", "x": "pixels"},
            "public": {"fraction": 0.2}, "eval_users": "auto", "evaluation": {"fraction": 0.3}, "eval_clients": 4}
    raw = tiny_config(Path("unused"), tmp_path).model_dump(mode="json")
    raw.update(data=data, model={"factory": "fedpub.models.emnist:Mlp", "kwargs": {"num_classes": 62}},
               strategy={"name": "dope", "clip_norm": 0.5, "noise_multiplier": 0.8, "public_clients_per_round": 2,
                         "sampling": {"kind": "poisson", "clients_per_round": 4}})
    users = load_data(fedpub.parse_config(raw)).train
    assert users.client_ids == sorted(f"u{u}" for u in range(10)) and users.num_classes == 62
    assert users.client_data("u3").x.shape == (6, 784) and users.num_examples("u2") == 5
    result = fedpub.run(raw, output_dir=None)
    assert result.rounds_done == 3 and result.epsilon > 0


@pytest.mark.parametrize("field, value", [("user", "writer"), ("x", "img"), ("y", "char")])
def test_a_column_the_data_lacks_is_refused_naming_the_field_and_the_columns(femnist_dir, tmp_path, field, value):
    config = _femnist_config(femnist_dir, tmp_path)
    data = config.data.model_dump(mode="json")
    config = fedpub.parse_config(yaml.safe_load(dump_config(config)) | {
        "data": {**data, "table": {**data["table"], field: value}}})
    with pytest.raises(DatasetError, match=f"data.table.{field} '{value}' is not a column of .*; its columns: "
                                           "image, writer_id, hsf_id, character"):
        load_data(config)


def test_a_device_node_reads_its_own_users_rows_from_a_table_file_or_a_dataset_folder(femnist_dir, tmp_path):
    from flwr.app import Context, RecordDict

    from fedpub.clients.client_app import node_runtime

    def node(node_config: dict) -> Context:
        return Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})

    config = _femnist_config(femnist_dir, tmp_path)
    population = load_data(config).train
    writer = population.client_ids[3]
    mine = datasets.load_from_disk(str(femnist_dir)).filter(
        lambda w: w == writer, input_columns="writer_id", keep_in_memory=True)
    mine.to_parquet(str(tmp_path / "mine.parquet"))
    mine.save_to_disk(str(tmp_path / "mine"))
    for path, extra in ((tmp_path / "mine.parquet", {}), (tmp_path / "mine", {"client-id": writer})):
        rt, cid = node_runtime(node({"data-path": str(path), **extra}), config)
        assert cid == writer and rt.train.client_ids == [writer]
        assert torch.equal(rt.client_data(cid).x, population.client_data(writer).x)
        assert rt.model(rt.client_data(cid).x).shape == (len(rt.client_data(cid)), 62)


def test_fedpub_data_describes_a_table_file_and_a_save_to_disk_shard_reads_as_a_table(femnist_dir, tmp_path):
    from typer.testing import CliRunner

    from fedpub.simulations.tools.data_cli import data_app

    shard = next(femnist_dir.glob("data-*.arrow"))
    out = CliRunner().invoke(data_app, ["verify", str(shard)]).output
    assert "a table of examples (Arrow)" in out and "writer_id: string" in out and "nulls: none" in out
    config = _femnist_config(femnist_dir, tmp_path, data={
        **_femnist_config(femnist_dir, tmp_path).data.model_dump(mode="json"), "source": "table", "path": str(shard)})
    from_table, from_hf = load_data(config).train, load_data(_femnist_config(femnist_dir, tmp_path)).train
    writer = from_hf.client_ids[2]
    assert from_table.client_ids == from_hf.client_ids and from_table.num_classes == 62
    assert torch.equal(from_table.client_data(writer).x, from_hf.client_data(writer).x)


def test_public_users_are_given_by_a_column_or_a_list(tmp_path):
    path = _parquet(tmp_path)
    table = pq.read_table(path / "part-0.parquet")
    flags = pa.array([u in ("u1", "u4") for u in table.column("uid").to_pylist()])
    pq.write_table(table.append_column("opted_out", flags), path / "part-0.parquet")
    factory = {"factory": "fedpub.models.emnist:Mlp", "kwargs": {"num_classes": 62}}
    base = {"source": "table", "path": str(path), "table": {"user": "uid", "x": "pixels", "public": "opted_out"},
            "evaluation": {"fraction": 0.3}}  # no test split: the test is of held-out users
    data = load_data(fedpub.parse_config({"data": base, "model": factory}))
    assert data.public_ids == ["u1", "u4"] and "u1" not in data.private_ids
    assert len(data.private_ids) + len(data.evaluation_ids) == 8 and data.evaluation_ids
    listed = {**base, "table": {"user": "uid", "x": "pixels"}, "public": {"users": ["u2", "u7"]}}
    assert load_data(fedpub.parse_config({"data": listed, "model": factory})).public_ids == ["u2", "u7"]
    with pytest.raises(ValueError, match="data.public.users: 1 listed public user.* no training user: nobody"):
        load_data(fedpub.parse_config({"data": {**listed, "public": {"users": ["nobody"]}}, "model": factory}))
    with pytest.raises(fedpub.ConfigError, match="data.public.users .* or data.public.fraction"):
        fedpub.parse_config({"data": {**listed, "public": {"users": ["u2"], "fraction": 0.1}}, "model": factory})
    mixed = pa.array([u == "u3" and i % 2 == 0 for i, u in enumerate(table.column("uid").to_pylist())])
    pq.write_table(table.append_column("opted_out", mixed), path / "part-0.parquet")
    with pytest.raises(DatasetError, match=r"marks only some rows of 1 user\(s\) public"):
        load_data(fedpub.parse_config({"data": base, "model": factory}))


def test_8_bit_images_stored_as_array2d_arrive_scaled_with_a_channel_axis(tmp_path):
    """A Hugging Face ``Array2D(dtype="uint8")`` image column, which the datasets library's numpy format widens to
    int64: read as the 8-bit image it is (v/255, a channel axis), as an ``Image`` column is (issue 44: it arrived as
    unscaled int64 without a channel axis)."""
    features = datasets.Features({"pixels": datasets.Array2D(shape=(28, 28), dtype="uint8"),
                                  "uid": datasets.Value("string"), "label": datasets.Value("int64")})
    images = [np.full((28, 28), 51 * (i % 5), np.uint8) for i in range(6)]
    datasets.Dataset.from_dict({"pixels": images, "uid": ["a", "a", "a", "b", "b", "b"], "label": [0, 1, 2, 3, 4, 5]},
                               features=features).save_to_disk(str(tmp_path / "hf"))
    config = fedpub.parse_config({"data": {"source": "huggingface", "path": str(tmp_path / "hf"),
                                           "table": {"user": "uid", "x": "pixels", "y": "label"}},
                                  "model": {"factory": "fedpub.models.emnist:Mlp", "kwargs": {"num_classes": 6}}})
    x = open_splits(config).train.client_data("a").x
    assert x.dtype == torch.float32 and tuple(x.shape) == (3, 1, 28, 28)
    assert sorted(float(v) for v in x.amax(dim=(1, 2, 3))) == pytest.approx([0.0, 0.2, 0.4])


def test_a_csv_with_one_column_per_feature_is_read_as_the_features_in_their_order(tmp_path):
    """``data.table.x`` a list of columns: a CSV of tabular data (one number column a feature) is read as
    ``(N, features)`` in the listed order (issue 44: such a CSV could not be read); a listed column the file lacks
    is named."""
    rows = [{"uid": f"u{i % 4}", "f0": i, "f1": 10.0 * i, "f2": -i, "label": i % 3} for i in range(12)]
    path = tmp_path / "tabular.csv"
    path.write_text("uid,f0,f1,f2,label\n" + "".join(
        f"{r['uid']},{r['f0']},{r['f1']},{r['f2']},{r['label']}\n" for r in rows))
    table = {"user": "uid", "x": ["f1", "f0", "f2"], "y": "label"}
    config = fedpub.parse_config({"data": {"source": "table", "path": str(path), "table": table},
                                  "model": {"factory": "fedpub.models.emnist:Mlp", "kwargs": {"num_classes": 3}}})
    user = open_splits(config).train.client_data("u1")
    assert user.x.dtype == torch.float32 and tuple(user.x.shape) == (3, 3)
    assert user.x.tolist() == [[10.0 * i, i, -i] for i in (1, 5, 9)] and user.y.tolist() == [1, 2, 0]
    with pytest.raises(DatasetError, match=r"data.table.x 'f9' is not a column of .*tabular.csv"):
        open_splits(fedpub.parse_config({**config.model_dump(mode="json"), "data": {
            "source": "table", "path": str(path), "table": {**table, "x": ["f0", "f9"]}}}))
    with pytest.raises(fedpub.ConfigError, match="data.table.x"):
        fedpub.parse_config({"data": {"source": "table", "path": str(path), "table": {**table, "x": ["f0", "f0"]}}})
