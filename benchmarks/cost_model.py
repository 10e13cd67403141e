#!/usr/bin/env python3
"""Analytic cost model: an L-layer message-passing (MP) potential in LAMMPS at up to 10,000 ranks.

    benchmarks/cost_model.py [--layers 3] [--t-atom-us 340] [--measured FILE] [--format text] ...

Compares the two ways pair_style mlip runs an MP model with cutoff rc (layers L, skin s):

  halo      ghost shell w = L*rc + s. Local atoms are evaluated in spatially compact chunks of
            C atoms, and every chunk also evaluates its (L-1)-hop halo again. Per MD step:
            positions forward (3 doubles per ghost) and forces reverse (3 doubles per ghost).
  exchange  ghost shell w = rc + s ('exchange yes'). Layers update owned atoms only; after each
            layer but the last the ghosts' features (D = 4F doubles per atom for PaiNN with F
            features) are forward-communicated, and their gradients reverse-communicated in the
            backward pass. Per step: 3 + 3 + 2*(L-1)*D doubles per ghost.

Model (per rank, per MD step; n local atoms, density rho):
  subdomain   a cube of side a = (n/rho)^(1/3); ghosts = rho*((a+2w)^3 - a^3).
  compute     t_atom * n * m. Halo: m = 1 + halo/C, with the chunk a cube of side
              c = (C'/rho)^(1/3), C' = min(C, n), halo = rho*((c+2h)^3 - c^3), h = (L-1)*rc
              (m = 1 for L = 1). Exchange: m = r (the recompute factor) when n exceeds the
              exchange chunk (each layer evaluated again in the backward pass), else 1.
  comm        each forward or reverse communication = 6 swaps (3 dims x 2 directions) x
              ceil(w/a) hops, one message each; it moves ghosts * values * 8 bytes in all.
              Plus one MPI_Allreduce per step (LAMMPS's reneighbouring check), ceil(log2 P)
              messages. Time = messages * alpha + bytes / beta.
  total       compute + comm; parallel efficiency = total(1 rank) / total(P ranks).

Assumptions:
  - Communication is not overlapped with compute, and ranks are perfectly load balanced.
  - 1 rank: its ghosts are its own periodic images, copied in memory: counted as no cost
    (bytes and messages are still listed). P > 1: every swap crosses the network (no
    intra-node shortcut), with no contention: the time depends on P only through the
    Allreduce. So weak scaling is flat beyond 8 ranks by construction.
  - Atom migration, reneighbouring (every ~10 steps) and thermo output are left out.
  - t_atom (us per evaluated atom, model call and forces) does not depend on n or on the path
    unless given per path (--measured). The cube grown by h overcounts a chunk's halo: atoms
    within L-1 hops lie within h of the chunk, i.e. in the cube rounded by h (--halo-shape
    round: m - 1 is 24% smaller at the defaults), and real chunks (recursive bisection) are
    not exact cubes.
  - A measured halo time gives t_atom = us/atom-step / m (m at the measured size); a measured
    exchange time gives t_atom = us/atom-step / r when its atoms exceed the exchange chunk.
"""
import argparse
import math

RANKS = (1, 8, 64, 512, 4096, 10000)


def options():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    a = p.add_argument
    a('--layers', type=int, default=3, help='message-passing layers L (default 3)')
    a('--rc', type=float, default=5.0, help='cutoff in A (default 5.0)')
    a('--skin', type=float, default=1.0, help='neighbour skin in A (default 1.0)')
    a('--features', type=int, default=64, help='features F; exchanged width D = 4F (default 64)')
    a('--chunk', type=int, default=128, help='halo path: atoms per chunk C (default 128)')
    a('--exchange-chunk', type=int, default=128, help='exchange path: atoms per chunk (default 128)')
    a('--halo-shape', choices=('cube', 'round'), default='cube',
      help="chunk halo: the cube grown by h (default), or rounded (cube's Minkowski sum with a ball)")
    a('--t-atom-us', type=float, default=340.0, help='compute per evaluated atom, us (default 340)')
    a('--recompute', type=float, default=1.3, help='exchange path: recompute factor r (default 1.3)')
    a('--latency-us', type=float, default=2.0, help='message latency alpha, us (default 2.0)')
    a('--bandwidth-GBs', type=float, default=12.5, help='bandwidth beta, GB/s (default 12.5: 100 Gb/s)')
    a('--density', type=float, default=0.1003, help='atoms per A^3 (default 0.1003: water)')
    a('--atoms-per-rank', type=int, default=100000, help='weak scaling (default 100000 = 1e9/1e4)')
    a('--sizes', default='100,1000,10000,100000,1000000',
      help='atoms per rank at --size-ranks (default 100,1000,...,1000000)')
    a('--size-ranks', type=int, default=10000, help='ranks of the atoms-per-rank table (default 10000)')
    a('--measured', metavar='FILE', help="lines 'path L atoms ranks us_per_atom_step' (path halo or "
      'exchange), or bench_exchange.sh table rows: 1-rank rows of --layers set t_atom per path')
    a('--format', choices=('markdown', 'text'), default='markdown')
    return p.parse_args()


def shell_atoms(a, w, rho):
    return rho * ((a + 2 * w) ** 3 - a ** 3)


def halo_multiplier(o, n):
    if o.layers < 2:
        return 1.0
    size = min(o.chunk, n)
    c, h = (size / o.density) ** (1 / 3), (o.layers - 1) * o.rc
    if o.halo_shape == 'cube':
        volume = (c + 2 * h) ** 3 - c ** 3
    else:
        volume = 6 * c * c * h + 3 * math.pi * c * h * h + 4 / 3 * math.pi * h ** 3
    return 1 + o.density * volume / size


def compute_multiplier(o, path, n):
    if path == 'halo':
        return halo_multiplier(o, n)
    return o.recompute if n > o.exchange_chunk else 1.0


def step_cost(o, path, n, ranks, t_atom):
    """Per-rank cost of one MD step: a dict of the table's columns."""
    a = (n / o.density) ** (1 / 3)
    if path == 'halo':
        w, values, comms = o.layers * o.rc + o.skin, [3, 3], 2
    else:
        w, comms = o.rc + o.skin, 2 + 2 * (o.layers - 1)
        values = [3, 3] + [4 * o.features] * (2 * (o.layers - 1))
    hops = math.ceil(w / a)
    ghosts = shell_atoms(a, w, o.density)
    nbytes = ghosts * sum(values) * 8
    messages = comms * 6 * hops + (math.ceil(math.log2(ranks)) if ranks > 1 else 0)
    multiplier = compute_multiplier(o, path, n)
    compute = t_atom[path] * n * multiplier / 1e3
    comm = 0.0 if ranks == 1 else messages * o.latency_us / 1e3 + nbytes / (o.bandwidth_GBs * 1e6)
    return dict(w=w, hops=hops, ghosts=ghosts, mb=nbytes / 1e6, messages=messages, m=multiplier,
                compute=compute, comm=comm, total=compute + comm)


def measured_t_atom(o, path_name):
    t_atom = {'halo': o.t_atom_us, 'exchange': o.t_atom_us}
    rows = {}
    with open(path_name) as f:
        for line in f:
            if line.lstrip().startswith('|'):  # bench_exchange.sh: | atoms | L | ranks | path | us |
                cells = [x.strip() for x in line.strip().strip('|').split('|')]
                fields = [cells[3], cells[1], cells[0], cells[2], cells[4]] if len(cells) >= 5 else []
            else:
                fields = line.split('#')[0].split()
            try:
                path, us = fields[0], float(fields[4])
                layers, atoms, ranks = (int(x) for x in fields[1:4])
            except (IndexError, ValueError):
                continue  # header, separator, comment or blank line
            if path in t_atom and layers == o.layers and ranks == 1 and atoms >= rows.get(path, (0,))[0]:
                rows[path] = (atoms, us)  # the largest system: the least surface per atom
    for path, (atoms, us) in rows.items():
        t_atom[path] = us / compute_multiplier(o, path, atoms)
    return t_atom


def table(o, header, rows):
    cells = [header] + [[str(x) for x in r] for r in rows]
    if o.format == 'markdown':
        lines = ['| ' + ' | '.join(r) + ' |' for r in cells]
        lines.insert(1, '|' + '---|' * len(header))
    else:
        width = [max(len(r[i]) for r in cells) for i in range(len(header))]
        lines = ['  '.join(x.rjust(wd) for x, wd in zip(r, width)) for r in cells]
    print('\n'.join(lines) + '\n')


COLUMNS = ['shell w (A)', 'hops', 'ghosts/rank', 'MB/rank/step', 'messages/step', 'compute x',
           'compute ms', 'comm ms', 'total ms']


def columns(c):
    return [f"{c['w']:g}", c['hops'], f"{c['ghosts']:,.0f}", f"{c['mb']:.3g}", c['messages'],
            f"{c['m']:.2f}", f"{c['compute']:,.1f}", f"{c['comm']:.3g}", f"{c['total']:,.1f}"]


def main():
    o = options()
    t_atom = measured_t_atom(o, o.measured) if o.measured else {'halo': o.t_atom_us, 'exchange': o.t_atom_us}
    paths = ('halo', 'exchange')
    print(f"Parameters: L={o.layers}, rc={o.rc:g} A, skin={o.skin:g} A, F={o.features} (D={4 * o.features}), "
          f"halo chunk C={o.chunk} ({o.halo_shape} halo), exchange chunk {o.exchange_chunk} (recompute "
          f"r={o.recompute:g}), t_atom halo {t_atom['halo']:.4g} us, exchange {t_atom['exchange']:.4g} us, "
          f"alpha={o.latency_us:g} us, beta={o.bandwidth_GBs:g} GB/s, rho={o.density:g} /A^3. "
          "No overlap of communication and compute; 1 rank: no communication cost.\n")

    print(f"Weak scaling, {o.atoms_per_rank:,} atoms per rank:\n")
    rows = []
    for path in paths:
        base = step_cost(o, path, o.atoms_per_rank, 1, t_atom)['total']
        for ranks in RANKS:
            c = step_cost(o, path, o.atoms_per_rank, ranks, t_atom)
            atoms = f'{ranks * o.atoms_per_rank:.2g}'.replace('e+0', 'e')
            rows.append([ranks, atoms, path] + columns(c) + [f"{base / c['total']:.2%}"])
    table(o, ['ranks', 'atoms', 'path'] + COLUMNS + ['efficiency'], rows)

    print(f'Atoms per rank at {o.size_ranks:,} ranks (halo/exchange: ratio of total times):\n')
    rows = []
    for n in (int(float(x)) for x in o.sizes.split(',')):
        cost = {path: step_cost(o, path, n, o.size_ranks, t_atom) for path in paths}
        for path in paths:
            ratio = cost['halo']['total'] / cost['exchange']['total']
            rows.append([f'{n:,}', path] + columns(cost[path]) + [f'{ratio:.2f}' * (path == 'exchange')])
    table(o, ['atoms/rank', 'path'] + COLUMNS + ['halo/exchange'], rows)


if __name__ == '__main__':
    main()
