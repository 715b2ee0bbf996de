"""kvtools.Tiers: a hierarchy of file tiers chained in libkv, in process
(issue 26): bounded LRU tiers spill down, hits below are copied up."""
import os

import pytest

import kvtools

MD = "meta-llama_Llama-3.1-8B_0123456789ab"


def blocks(root):
    return sorted(f for _, _, fs in os.walk(root) for f in fs if f.endswith(".bin"))


@pytest.fixture
def dirs(tmp_path):
    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    return str(local), str(shared)


def test_bounded_tier_spills_oldest_and_reads_through(dirs):
    local, shared = dirs
    data = {"abcdef%04d" % i: bytes([i]) * 300000 for i in range(4)}
    with kvtools.Tiers([(local, 700000), shared]) as t:
        for h, b in data.items():
            t.put(MD, h, b)
        # Two fit in 700,000 bytes: the two oldest went down.
        assert blocks(local) == ["abcdef0002.bin", "abcdef0003.bin"]
        assert blocks(shared) == ["abcdef0000.bin", "abcdef0001.bin"]
        st = t.stats()
        assert (st[0]["blocks"], st[0]["used_bytes"], st[0]["spills"]) == (2, 600000, 2)
        for h, b in data.items():
            assert t.get(MD, h) == b
        assert t.get(MD, "abcdef0009") is None
        assert t.has(MD, "abcdef0000") and not t.has(MD, "abcdef0009")
        # Read in write order, each copied up sends the next one down.
        st = t.stats()
        assert (st[0]["hits"], st[0]["promotions"], st[1]["hits"]) == (0, 4, 4)
        assert t.delete(MD, "abcdef0000") and not t.has(MD, "abcdef0000")
        assert not t.delete(MD, "abcdef0000")


def test_second_hit_and_never(dirs):
    local, shared = dirs
    with kvtools.Tiers([shared]) as t:
        t.put(MD, "abcdef01", b"x" * 5000)
    with kvtools.Tiers([(local, 1 << 20), shared], promote="never") as t:
        assert t.get(MD, "abcdef01") == b"x" * 5000
        assert blocks(local) == []
    with kvtools.Tiers([(local, 1 << 20), shared], promote="second-hit") as t:
        t.get(MD, "abcdef01")
        assert blocks(local) == []
        t.get(MD, "abcdef01")
        assert blocks(local) == ["abcdef01.bin"]


def test_refusals(dirs, tmp_path):
    local, shared = dirs
    with pytest.raises(ValueError, match="needs a capacity"):
        kvtools.Tiers([local, shared])
    with pytest.raises(ValueError, match="promote"):
        kvtools.Tiers([shared], promote="often")
    with pytest.raises(kvtools.KvError) as e:
        kvtools.Tiers([(str(tmp_path / "nowhere"), 1 << 20), shared])
    assert e.value.errno_name == "ENOENT"
    t = kvtools.Tiers([shared])
    t.close()
    with pytest.raises(ValueError, match="closed"):
        t.get(MD, "abcdef01")


def test_a_claimed_root_is_refused(tmp_path):
    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    with kvtools.Tiers([(str(local), 1 << 20), str(shared)]):
        with pytest.raises(kvtools.KvError) as e:
            kvtools.Tiers([(str(local), 1 << 20), str(shared)])
        assert e.value.errno_name == "EBUSY"
    # Closed, the claim is gone.
    kvtools.Tiers([(str(local), 1 << 20), str(shared)]).close()


def test_each_tier_reports_its_changes(dirs):
    local, shared = dirs
    seen = []
    with kvtools.Tiers([(local, 700000), shared],
                       on_change=lambda *c: seen.append(c)) as t:
        for i in range(3):
            t.put(MD, "abcdef%04d" % i, bytes([i]) * 300000)
        key = [c[2] for c in seen if c[:2] == (1, "stored")]
        assert len(key) == 1 and key[0].endswith("/abcdef0000.bin")
        # The spill lands below before the block leaves the local tier.
        assert [(c[0], c[1], c[3]) for c in seen] == [
            (0, "stored", 300000), (0, "stored", 300000),
            (1, "stored", 300000), (0, "moved", 300000), (0, "stored", 300000)]
        del seen[:]
        assert t.get(MD, "abcdef0000") == bytes([0]) * 300000
        assert [c[:2] for c in seen] == [(1, "stored"), (0, "moved"), (0, "promoted")]
        del seen[:]
        assert t.delete(MD, "abcdef0000")
        assert [c[:2] + (c[3],) for c in seen] == [(0, "deleted", 0), (1, "deleted", 0)]
        # The counters count the same reports.
        st = t.stats()
        assert (st[0]["puts"], st[0]["spills"], st[0]["promotions"]) == (3, 2, 1)
