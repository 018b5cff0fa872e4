//! The token ring's suite in the EVS world (issue 18): each seed draws the ring's windows
//! (the original ring, `accelerated_window = 0`, in half the seeds), its message size (so
//! that values are packed), a service per node (Agreed or Safe), sometimes a small
//! send window (so `propose` says `Busy`) and sometimes a small ring window
//! (`buffer_messages_max`, so that a lagging member makes the holders stop stamping).

use super::{EvsConfig, nodes_for, run_described};
use crate::rng::SimRng;
use crate::sim::Violation;
use abcast_core::NodeId;
use abcast_core::config::StartInfo;
use abcast_core::mutation::Mutation;
use abcast_core::token::messages::{K_COMMIT, K_TOKEN};
use abcast_core::token::{Service, TokenConfig, TokenRing};

/// Salt that keeps the parameter draws apart from the fault plan's.
const PARAMS_SALT: u64 = 0x746F_6B65_6E5F_7072;

/// The members' configurations for one seed (index k is node k + 1).
pub fn configs_for(
    cfg: &EvsConfig,
    mutation: Option<Mutation>,
) -> Result<Vec<TokenConfig>, String> {
    let n = nodes_for(cfg);
    let mut rng = SimRng::new(cfg.seed ^ PARAMS_SALT);
    let members: Vec<NodeId> = (1..=n as u32).map(NodeId).collect();
    let personal = rng.between(1, 30) as u32;
    let accelerated = if rng.chance_ppm(500_000) {
        0
    } else {
        rng.between(1, u64::from(personal)) as u32
    };
    let global = rng.between(u64::from(personal), 240) as u32;
    let max_message_bytes = rng.between(200, 1350) as usize;
    let window_values = if rng.chance_ppm(200_000) { 64 } else { 1 << 16 };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = TokenConfig::new(members.clone());
        c.personal_window = personal;
        c.accelerated_window = accelerated;
        c.global_window = global;
        c.max_message_bytes = max_message_bytes;
        c.window_values = window_values;
        c.service = if rng.chance_ppm(500_000) {
            Service::Safe
        } else {
            Service::Agreed
        };
        c.mutation.set(mutation)?;
        out.push(c);
    }
    // Sometimes a small window (`buffer_messages_max`, from twice the global window), so
    // that a member that lags (a data lane cut) fills it and the holders stop stamping.
    // Drawn last, so the draws above stay what they were.
    if rng.chance_ppm(300_000) {
        let g = u64::from(global);
        let buffer = rng.between(2 * g, 8 * g);
        for c in &mut out {
            c.buffer_messages_max = buffer;
        }
    }
    Ok(out)
}

/// `cfg` with what the token ring needs: its token kinds, and the mutation in replay lines.
pub fn world_config(cfg: &EvsConfig, mutation: Option<Mutation>) -> EvsConfig {
    let mut c = cfg.clone();
    c.nodes = nodes_for(cfg);
    c.token_kinds = vec![K_TOKEN, K_COMMIT];
    if let Some(m) = mutation {
        c.replay_env = format!(" ABCAST_SIM_MUTATION={m}");
        if matches!(
            m,
            Mutation::GroupsNoStateExchange | Mutation::GroupsDeliverDuringExchange
        ) {
            c.group_mutation = Some(m);
        }
    }
    c
}

/// One seed of the token ring.
pub fn run_token(
    cfg: &EvsConfig,
    mutation: Option<Mutation>,
) -> Result<super::EvsReport, Box<Violation>> {
    let cfg = world_config(cfg, mutation);
    let configs = match configs_for(&cfg, mutation) {
        Ok(c) => c,
        Err(e) => {
            return Err(Box::new(Violation {
                kind: crate::ViolationKind::BadConfig,
                seed: cfg.seed,
                mix: cfg.mix,
                at_us: 0,
                node: None,
                incarnation: None,
                instance: None,
                value: None,
                detail: e,
                replay: cfg.replay_line(),
                plan: None,
                trace_tail: Vec::new(),
            }));
        }
    };
    let factory = |id: NodeId, start: StartInfo| {
        let c = configs[(id.0 as usize).saturating_sub(1) % configs.len()].clone();
        TokenRing::new(c, id, start).expect("the suite's token configurations are valid")
    };
    let describe = |p: &TokenRing| p.describe();
    run_described(&cfg, &factory, Some(&describe))
}

/// Replays the seed named by `ABCAST_SIM_SEED` (with `ABCAST_SIM_MIX`, `ABCAST_SIM_NODES`,
/// `ABCAST_SIM_MUTATION`, `ABCAST_SIM_VERBOSE=0|1`, default 1), printing its events;
/// `None` when no seed is set.
pub fn replay_from_env() -> Option<Result<super::EvsReport, Box<Violation>>> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let seed: u64 = var("ABCAST_SIM_SEED")?.parse().ok()?;
    let mix = var("ABCAST_SIM_MIX")
        .and_then(|m| m.parse().ok())
        .unwrap_or(crate::FaultMix::Mixed);
    let mut cfg = EvsConfig::new(mix);
    cfg.seed = seed;
    cfg.nodes = var("ABCAST_SIM_NODES")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    cfg.verbose = var("ABCAST_SIM_VERBOSE").is_none_or(|v| v != "0");
    cfg.verbose_messages = var("ABCAST_SIM_VERBOSE").is_some_and(|v| v == "2");
    let mutation = var("ABCAST_SIM_MUTATION").and_then(|m| m.parse::<Mutation>().ok());
    let r = run_token(&cfg, mutation);
    match &r {
        Ok(rep) => eprintln!("replay: no violation; {rep:?}"),
        Err(v) => eprintln!("{v}"),
    }
    Some(r)
}

/// Runs `seeds` of `mix` (every violation printed with its replay line).
pub fn sweep(
    mix: crate::FaultMix,
    seeds: std::ops::Range<u64>,
    mutation: Option<Mutation>,
) -> super::EvsSweep {
    sweep_with(&EvsConfig::new(mix), seeds, mutation)
}

/// [`sweep`] from `base` (its mix, bounds and phases).
pub fn sweep_with(
    base: &EvsConfig,
    seeds: std::ops::Range<u64>,
    mutation: Option<Mutation>,
) -> super::EvsSweep {
    let mut s = super::EvsSweep::new();
    // Side by side (`for_seeds`); the totals add up in seed order.
    for (_, r) in crate::sweep::for_seeds(seeds, false, |seed| {
        let mut cfg = base.clone();
        cfg.seed = seed;
        run_token(&cfg, mutation)
    }) {
        if mutation.is_none()
            && let Err(v) = &r
        {
            eprintln!("{v}");
        }
        s.add(r);
    }
    s
}

/// The fault kinds each mix of the token ring's suite must produce over its seeds (the
/// tests assert them, as `suites::Proto::expected_faults` for the other protocols), so
/// that a sweep that passed is known to have met its faults.
pub fn expected_faults(mix: crate::FaultMix) -> &'static [crate::faults::FaultKind] {
    use crate::FaultMix;
    use crate::faults::FaultKind::*;
    match mix {
        FaultMix::Loss => &[TokenLoss, DataLaneCut],
        FaultMix::Partition => &[TokenLoss],
        FaultMix::Crash => &[CrossIncarnation, PartialFanout, TokenLoss],
        FaultMix::Pause => &[Pause, TokenLoss],
        FaultMix::PartialConnectivity => {
            &[PartialConnectivity, FaultsRemain, DataLaneCut, TokenLoss]
        }
        FaultMix::Mixed => &[
            CrossIncarnation,
            PartialFanout,
            Pause,
            PartialConnectivity,
            FaultsRemain,
            DataLaneCut,
            TokenLoss,
        ],
        _ => &[],
    }
}
