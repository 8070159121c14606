"""`packed_bert_tf.training.cluster`: TF_CONFIG parsing and the one line a
lost peer's error becomes (the processes themselves: `tests.multi_worker`)."""

import json
import socket

import pytest
import tensorflow as tf

from packed_bert_tf.training import cluster


def tf_config(cluster_spec, task_type="worker", index=0) -> str:
    return json.dumps({"cluster": cluster_spec, "task": {"type": task_type, "index": index}})


def test_tasks_are_ordered_chief_first_with_their_names():
    task = cluster.parse_tf_config(tf_config(
        {"worker": ["w0:1", "w1:2"], "chief": ["c:3"]}, "worker", 1))
    assert task.addresses == ("c:3", "w0:1", "w1:2")
    assert task.names == ("chief 0", "worker 0", "worker 1")
    assert (task.index, task.name, task.num_workers, task.is_chief) == (2, "worker 1", 3,
                                                                        False)


@pytest.mark.parametrize("text, message", [
    ("{", "TF_CONFIG is not JSON"),
    ('{"cluster": {}}', 'needs "cluster" and "task"'),
    (tf_config({"ps": ["a:1"]}), "job 'ps' is not one of"),
    (tf_config({"worker": ["a"]}), "'a' in job 'worker' is not host:port"),
    (tf_config({"worker": ["a:1", "a:1"]}), "a:1 given for two tasks"),
    (tf_config({"worker": ["a:1"]}, "worker", 1), "task 'worker' 1 is not in the cluster"),
])
def test_a_bad_tf_config_is_one_clear_error(text, message):
    with pytest.raises(cluster.ClusterError, match=message.replace("(", r"\(")):
        cluster.parse_tf_config(text)


def unavailable(message):
    return tf.errors.UnavailableError(None, None, message)


def test_a_missed_heartbeat_names_the_lost_task():
    error = unavailable("Collective ops is aborted by: ... The following tasks are "
                        "unhealthy (stopped sending heartbeats):\n"
                        "/job:worker/replica:0/task:1\nThe program needs to restart.")
    assert cluster.describe_cluster_failure(error) == "worker 1 stopped (no heartbeat)"


def test_a_broken_rpc_to_a_remote_target_names_it():
    # As TF 2.21 reports a peer SIGKILLed mid-step, before its heartbeat is missed.
    error = unavailable("Graph execution error:\n\nAdditional GRPC error information "
                        "from remote target /job:worker/replica:0/task:1 while calling "
                        "/tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from "
                        "peer  {grpc_status:14, grpc_message:\"recvmsg:Connection reset "
                        "by peer\"}")
    assert cluster.describe_cluster_failure(error) == \
        "worker 1 stopped (connection reset by peer)"


def listening_and_closed_addresses():
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    return listening, f"127.0.0.1:{listening.getsockname()[1]}", f"127.0.0.1:{closed_port}"


def test_an_anonymous_failure_probes_the_peers():
    listening, alive, dead = listening_and_closed_addresses()
    with listening:
        task = cluster.WorkerTask("worker", 0, ("127.0.0.1:1", alive, dead), 0,
                                  ("worker 0", "worker 1", "worker 2"))
        # Never probes itself.
        assert cluster.unreachable_peers(task) == [("worker 2",
                                                    "its address refuses connections")]
        error = unavailable("Graph execution error:\n\nsomething failed")
        assert cluster.describe_cluster_failure(error, task) == \
            "worker 2 stopped (its address refuses connections)"
        assert cluster.describe_cluster_failure(error) == \
            "UnavailableError: Graph execution error:"


def test_cluster_errors_become_one_line_only_with_several_workers():
    listening, alive, dead = listening_and_closed_addresses()
    with listening:
        task = cluster.WorkerTask("chief", 0, (alive, dead), 0, ("chief 0", "worker 0"))
        with pytest.raises(cluster.ClusterError, match=(
                r"^chief 0 of 2: the cluster failed: worker 0 stopped \(its address "
                r"refuses connections\); restart every worker to resume from the last "
                r"checkpoint in /out$")):
            with cluster.cluster_errors(task, "/out"):
                raise unavailable("lost")
    with pytest.raises(tf.errors.UnavailableError):
        with cluster.cluster_errors(cluster.SINGLE_WORKER, "/out"):
            raise unavailable("lost")
