"""The Flower message protocol of client payloads: each travels under its own record name, the node reads them all
and replies the names it applied; the server refuses a reply that did not apply one it was sent, that names one it
was not sent, or whose list is not a list of names."""

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, Metadata, MetricRecord, RecordDict

from fedpub import protocol as key
from fedpub.clients.flower_protocol import read_train, update_reply
from fedpub.payloads import ClientPayload
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.events import PoissonSampling
from fedpub.round_driver import RoundDriver
from fedpub.step import chain
from fedpub.steps.aggregate import aggregate
from fedpub.steps.clip import clip
from fedpub.strategies.flower import FedpubStrategy, MalformedReply, TrainFnPool, to_array_record
from fedpub.strategies.flower.replies import read_reply
from fedpub.strategy import StrategyCore

MODEL = {"w": torch.zeros(3)}
A = {"w": torch.full((3,), 2.0)}


def _message(content: RecordDict) -> Message:
    """A TRAIN message or reply outside a Flower run (no run, node or task to take the metadata from)."""
    return Message(content, metadata=Metadata(run_id=1, message_id="m", src_node_id=0, dst_node_id=1,
                                              reply_to_message_id="", group_id="", created_at=0.0, ttl=60.0,
                                              message_type=MessageType.TRAIN))


def _train_message(**payloads) -> Message:
    content = RecordDict({
        key.ARRAYS: to_array_record(MODEL),
        key.CONFIG: ConfigRecord({key.ROUND: 1, key.CLIENT_ID: "u1", key.PUBLIC: False}),
    })
    for name, tensors in payloads.items():
        content[key.payload_record(name)] = to_array_record(tensors)
    return _message(content)


def _reply(applied) -> Message:
    return _message(RecordDict({
        key.UPDATE: to_array_record({"w": torch.ones(3)}),
        key.METRICS: MetricRecord({key.NUM_EXAMPLES: 4}),
        key.CLIENT: ConfigRecord({key.CLIENT_ID: "u1", key.PAYLOADS_APPLIED: applied}),
    }))


def test_a_node_reads_every_payload_and_its_reply_names_those_it_applied():
    msg = _train_message(preconditioner=A, center=MODEL)
    assert key.payload_record("preconditioner") in msg.content.keys()
    task = read_train(msg)
    assert task.payloads.keys() == {"preconditioner", "center"}
    assert torch.equal(task.payloads["preconditioner"]["w"], A["w"])
    assert read_train(_train_message()).payloads == {}
    reply = update_reply(msg, {"w": torch.ones(3)}, 4, applied=task.payloads)
    update, _ = read_reply(reply, MODEL, "u1", payloads=("preconditioner", "center"))
    assert torch.equal(update["w"], torch.ones(3))


def test_a_reply_must_apply_exactly_the_payloads_it_was_sent():
    with pytest.raises(MalformedReply, match=r"sent the payloads \['preconditioner'\] \(records "
                                             r"\['payload-preconditioner'\]\) and did not say it trained with them"):
        read_reply(_reply([]), MODEL, "u1", payloads=("preconditioner",))
    with pytest.raises(MalformedReply, match=r"applied the payloads \['center'\], which the node was not sent"):
        read_reply(_reply(["preconditioner", "center"]), MODEL, "u1", payloads=("preconditioner",))
    standard = _message(RecordDict({key.ARRAYS: ArrayRecord(torch_state_dict={"w": torch.ones(3)})}))
    with pytest.raises(MalformedReply, match="did not say it trained with them"):
        read_reply(standard, MODEL, "u1", payloads=("preconditioner",))
    assert read_reply(standard, MODEL, "u1")[0]["w"].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("applied", ["preconditioner", True, ["preconditioner", "preconditioner"], [""]])
def test_the_applied_list_is_read_strictly(applied):
    with pytest.raises(MalformedReply, match=rf"user u1's reply: {key.PAYLOADS_APPLIED}=.* is not a list of distinct"):
        read_reply(_reply(applied), MODEL, "u1", payloads=("preconditioner",))


def test_a_server_held_train_fn_pool_cannot_be_sent_a_payload():
    center = ClientPayload("center", lambda state: None, private=False, public=True)
    core = StrategyCore("t", chain(clip(1.0), aggregate()), PoissonSampling(0.5), 2, 0, public_cohort=1, client_payloads=(center,))
    driver = RoundDriver(core, UserLevelAccountant(), private_ids=None, delta=1e-5)
    pool = TrainFnPool(lambda weights, data: weights, {"p0": None})
    with pytest.raises(ValueError, match=r"sends its public users the payloads \['center'\], which a TrainFnPool "
                                         "cannot apply: use public nodes"):
        FedpubStrategy(driver, public_pool=pool)
    FedpubStrategy(driver, public_nodes=True)
