"""What a saved replay buffer must be before a restore changes anything: its layout and
capacity this buffer's, its counters consistent, every field of its dtype and shape, floats
finite, actions within the action space, done flags 0 or 1, frames of the space's dtype, and
each live transition's frame stacks within its env copy's stream, in order, with the n-step
links that stream allows. One line names the first problem; the buffer is left as it was
(:meth:`~beyondfit.rl.replay.buffer.ReplayBuffer.load_state_dict` asks here first)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.checks import is_count

if TYPE_CHECKING:
    from beyondfit.rl.replay.buffer import Layout, ReplayBuffer


def first_frame(stack: tuple[int, int], k: int) -> int:
    """The stream position of a ``k``-frame stack's oldest frame (``stack``: its newest
    frame's position and how many of its frames repeat its first)."""
    end, pad = stack
    return end - (k - 1 - pad)


class RestoreCheck:
    """The checks of a saved buffer state against the buffer it is offered to."""

    def __init__(self, buffer: ReplayBuffer, state: dict[str, Any]) -> None:
        self.buffer, self.state = buffer, state

    def check(self) -> tuple[np.ndarray, ...] | None:
        """Raise on the first problem; ``None`` when the state holds no contents, else (for
        frames; ``()`` for vectors) each live transition's copy and obs-stack start, oldest
        first."""
        buffer, state = self.buffer, self.state
        capacity = buffer.capacity
        layout = state.get("layout")
        if layout != buffer.layout.describe():
            raise BeyondfitError(f"buffer.layout={layout!r}: the checkpoint's replay buffer holds "
                                 f"other transitions than this env's "
                                 f"({buffer.layout.describe()}): resume with the same env")
        if state.get("capacity") != capacity:
            raise BeyondfitError(f"buffer.capacity={state.get('capacity')!r} is not this "
                                 f"buffer's {capacity}: resume with the same "
                                 "task.replay.buffer_size and task.total_env_steps")
        added, size, position = state.get("added"), state.get("size"), state.get("position")
        if not is_count(added):
            raise BeyondfitError(f"buffer.added={added!r} is not a whole number >= 0")
        filled = min(added, capacity)
        for name, value in (("size", size), ("position", position)):
            if not is_count(value) or value > capacity:
                raise BeyondfitError(f"buffer.{name}={value!r} is not a whole number in [0, "
                                     f"{capacity}] (the buffer's capacity)")
        if position != added % capacity:
            raise BeyondfitError(f"buffer.position={position} does not follow buffer.added="
                                 f"{added}: transitions are written in order, wrapping at "
                                 f"{capacity}")
        frames = buffer.layout.frames
        if size > filled or (not frames and size != filled):
            raise BeyondfitError(f"buffer.size={size} is not {'at most ' if frames else ''}"
                                 f"{filled}, the transitions {added} stored leave in a buffer "
                                 f"of {capacity}")
        if frames and state.get("frames_per_copy") != buffer.frames_per_copy:
            raise BeyondfitError(f"buffer.frames_per_copy={state.get('frames_per_copy')!r} is "
                                 f"not this buffer's {buffer.frames_per_copy}")
        fields = state.get("fields")
        if fields is None:
            return None
        self.fields(fields, filled)
        streamed = self.streams(fields, added, size) if frames else ()
        if buffer.n_step > 1:
            self.links(fields, added, size, streamed[0] if frames else None)
        return streamed

    def fields(self, fields: Any, filled: int) -> None:
        """Every field: a tensor of the buffer's dtype and ``filled`` rows, its values what
        the collector stores."""
        buffer = self.buffer
        if isinstance(fields, dict) and set(fields) ^ set(buffer.fields) == {"follow"}:
            raise BeyondfitError(
                f"buffer.fields {'lacks' if buffer.n_step > 1 else 'holds'} the links of n-step "
                f"returns: the checkpoint's run had another task.replay.n_step than this run's "
                f"{buffer.n_step}: resume with the same task.replay.n_step")
        if not isinstance(fields, dict) or set(fields) != set(buffer.fields):
            shown = sorted(fields) if isinstance(fields, dict) else type(fields).__name__
            raise BeyondfitError(f"buffer.fields holds {shown}, not {sorted(buffer.fields)}")
        for name, field in buffer.fields.items():
            value = fields[name]
            want = (filled, *field.shape[1:])
            if not isinstance(value, torch.Tensor) or value.dtype != field.dtype or tuple(
                    value.shape) != want:
                shown = (f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor)
                         else type(value).__name__)
                raise BeyondfitError(
                    f"buffer.{name} {shown} is not {filled} transitions of {want[1:]} "
                    f"{field.dtype} (its filled part): resume with the same "
                    "task.replay.buffer_size and env")
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise BeyondfitError(f"buffer.{name} holds values that are not finite (NaN or "
                                     "inf): no transition this package stores does")
        check_actions(fields["actions"], buffer.layout)
        for name in ("terminated", "truncated"):
            bad = (fields[name] != 0) & (fields[name] != 1)
            if bool(bad.any()):
                i = int(bad.nonzero()[0, 0])
                raise BeyondfitError(f"buffer.{name} holds {float(fields[name][i])!r} at "
                                     f"transition {i}: a done flag is 0 or 1")

    def links(self, fields: dict[str, torch.Tensor], added: int, size: int,
              copies: np.ndarray | None) -> None:  # fmt: skip
        """n-step: each live transition's link is ``-1`` (always at an episode's end) or a
        newer live transition no other links to (of the same env copy, where ``copies`` tells
        each live transition's); each copy's newest transition (``last``) is ``-1`` or a live
        one of that copy, not ended and not linked on yet."""
        buffer, capacity = self.buffer, self.buffer.capacity
        last = self.state.get("last")
        if not (isinstance(last, list) and len(last) == buffer.num_envs and all(
                isinstance(x, int) and (x == -1 or added - size <= x < added) for x in last)):
            raise BeyondfitError(f"buffer.last={last!r} is not a list of {buffer.num_envs} "
                                 f"live transition numbers (from {added - size} to "
                                 f"{added - 1}) or -1: the checkpoint's run had another "
                                 "task.replay.n_step, or the file was changed")
        oldest = (added - size) % capacity
        live = (np.arange(added - size, added) % capacity)
        to = fields["follow"].numpy()[live]
        ended = (fields["terminated"].numpy()[live] + fields["truncated"].numpy()[live]) > 0
        age = (to - oldest) % capacity  # a link's target, counted from the oldest live one
        linked = to >= 0
        if ((to < -1) | (to >= capacity) | (linked & (
                ended | (age <= np.arange(size)) | (age >= size)))).any() or len(
                np.unique(age[linked])) != int(linked.sum()) or (copies is not None and (
                copies[age[linked]] != copies[linked]).any()):
            raise BeyondfitError("buffer.follow links a transition to one that is not a newer "
                                 "live transition of its episode: the file was changed")
        for c, number in enumerate(last):
            i = number - (added - size)  # its place among the live ones
            if number != -1 and (ended[i] or linked[i] or last.count(number) > 1 or (
                    copies is not None and copies[i] != c)):
                raise BeyondfitError(f"buffer.last[{c}]={number} is not env copy {c}'s newest "
                                     "transition of an episode that goes on: the file was "
                                     "changed")

    def streams(self, fields: dict[str, torch.Tensor], added: int, size: int
                ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The frame streams: each copy's frames, written count and tip; each live
        transition's stacks within its copy's stream (not overwritten), obs before next_obs
        by one frame or one stack, and a copy's transitions in stream order."""
        buffer, state = self.buffer, self.state
        n, ring, k = buffer.num_envs, buffer.frames_per_copy, buffer.stack
        written, tips, frames = state.get("written"), state.get("tip"), state.get("frames")
        for key, value in (("written", written), ("tip", tips), ("frames", frames)):
            if not isinstance(value, list) or len(value) != n:
                raise BeyondfitError(f"buffer.{key} is not a list of {n} entries (one per env "
                                     "copy)")
        for c in range(n):
            w, tip, kept = written[c], tips[c], frames[c]
            if not is_count(w):
                raise BeyondfitError(f"buffer.written[{c}]={w!r} is not a whole number >= 0")
            want = (min(w, ring), *buffer.layout.frame_shape)
            if not isinstance(kept, torch.Tensor) or kept.dtype != buffer.frames.dtype or tuple(
                    kept.shape) != want:
                shown = (f"{tuple(kept.shape)} {kept.dtype}" if isinstance(kept, torch.Tensor)
                         else type(kept).__name__)
                raise BeyondfitError(f"buffer.frames[{c}] {shown} is not {want[0]} frames of "
                                     f"{want[1:]} {buffer.frames.dtype} (buffer.written[{c}]="
                                     f"{w} in a ring of {ring})")
            if kept.is_floating_point() and not bool(torch.isfinite(kept).all()):
                raise BeyondfitError(f"buffer.frames[{c}] holds values that are not finite")
            if tip is not None and not (
                    isinstance(tip, list) and len(tip) == 2 and all(map(is_count, tip))
                    and tip[0] == w - 1 and tip[1] < k and first_frame(tip, k) >= max(w - ring, 0)):
                raise BeyondfitError(f"buffer.tip[{c}]={tip!r} is not null or [{w - 1}, pad], "
                                     f"the stack ending at the newest frame of env copy {c}'s "
                                     f"stream (pad: 0 to {k - 1} repeated first frames)")
        live = (np.arange(added - size, added) % buffer.capacity)
        rows_all = n * ring
        obs_at, next_at = fields["obs_at"].numpy()[live], fields["next_at"].numpy()[live]
        pads, next_pads = obs_at // rows_all, next_at // rows_all
        copies = obs_at % rows_all // ring
        if ((obs_at < 0) | (next_at < 0) | (pads >= k) | (next_pads >= k)
                | (next_at % rows_all // ring != copies)).any():
            raise BeyondfitError(f"buffer.obs_at or buffer.next_at holds a frame row outside "
                                 f"the streams of {n} env copies, or a transition whose two "
                                 "stacks are in different streams")
        w = np.asarray(written, dtype=np.int64)[copies]
        # Each stored row as its stream position: the newest frame written there.
        end = w - 1 - ((w - 1 - obs_at % ring) % ring)
        nxt = w - 1 - ((w - 1 - next_at % ring) % ring)
        start = end - (k - 1 - pads)
        kept = np.maximum(w - ring, 0)
        step = nxt - end
        if ((start < kept) | (nxt - (k - 1 - next_pads) < kept) | (step < 1) | (step > k)).any():
            raise BeyondfitError("buffer.obs_at holds a transition whose stacks are not in its "
                                 "env copy's stream (overwritten, or next_obs not one frame to "
                                 "one stack after obs)")
        for c in range(n):  # oldest frames in order (a padded start's share one), newest apart
            mine = copies == c
            if (np.diff(start[mine]) < 0).any() or (np.diff(nxt[mine]) <= 0).any():
                raise BeyondfitError(f"buffer.obs_at: env copy {c}'s transitions are not in "
                                     "the order of its stream")
        return copies, start


def check_actions(actions: torch.Tensor, layout: Layout) -> None:
    """Stored actions the action space holds: indices ``0 .. n - 1``, or ``[-1, 1]`` values."""
    if layout.discrete:
        bad = (actions < 0) | (actions >= layout.actions)
        want = f"an action index of this env's {layout.actions} actions (0 to {layout.actions - 1})"
    else:
        bad = (actions.abs() > 1).flatten(1).any(1)  # (C, act_dim) -> (C,)
        want = "an action scaled to [-1, 1]"
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        value = actions[i].tolist()
        raise BeyondfitError(f"buffer.actions holds {value!r} at transition {i}: not {want}")
