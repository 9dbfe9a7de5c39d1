//! The backend's cost model (`backend_acl::cost`, which the graph fusion asks) uses
//! acl-emu's figures: for every SoC acl-emu models, one aclnn call of each kind costs the
//! same in both, launch aside, and the replayed launch is the same.

use acl_emu::model::{LAUNCH_PS, REPLAYED_LAUNCH_PS, Soc};
use backend_acl::cost::{self, SocModel};
use runtime::{DType, GeluApprox, Op, TensorMeta};

const SOCS: &[&str] = &[
    "Ascend910A",
    "Ascend910B",
    "Ascend910ProA",
    "Ascend910ProB",
    "Ascend910PremiumA",
    "Ascend910B1",
    "Ascend910B2",
    "Ascend910B2C",
    "Ascend910B3",
    "Ascend910B4",
    "NoSuchSoc",
];

fn m(dt: DType, s: &[usize]) -> TensorMeta {
    TensorMeta::new(dt, s.to_vec())
}

#[test]
fn every_call_costs_what_the_emulator_charges() {
    assert_eq!(cost::REPLAYED_LAUNCH_PS, REPLAYED_LAUNCH_PS);
    let mut cases: Vec<(Op, Vec<TensorMeta>, bool)> = Vec::new();
    for dt in [DType::F16, DType::F32] {
        let (a, b) = (m(dt, &[512, 1024]), m(dt, &[1024, 4096]));
        cases.push((Op::MatMul { trans_a: false, trans_b: false }, vec![a.clone(), b.clone()], false));
        cases.push((Op::MatMul { trans_a: false, trans_b: false }, vec![a.clone(), b], true));
        cases.push((Op::Add, vec![a.clone(), a.clone()], false));
        cases.push((Op::Softmax { axis: -1 }, vec![m(dt, &[16, 512, 512])], false));
        cases.push((Op::Gelu(GeluApprox::Erf), vec![a.clone()], false));
        let (q, mask) = (m(dt, &[1, 16, 512, 64]), m(dt, &[1, 1, 1, 512]));
        cases.push((
            Op::Attention { scale: None, layout: Default::default(), causal: false },
            vec![q.clone(), q.clone(), q, mask],
            false,
        ));
    }
    cases.push((Op::Cast { to: DType::F16 }, vec![m(DType::F32, &[512, 1024])], false));
    for soc in SOCS {
        let (ours, emu) = (SocModel::of(soc), Soc::of(soc));
        for (op, ins, fp16) in &cases {
            let outs = op.infer(ins).expect("infer");
            let want = emu.kernel(op, ins, &outs, *fp16).ps - LAUNCH_PS;
            assert_eq!(ours.call_ps(op, ins, &outs, *fp16), want, "{soc}: {op:?} {ins:?} fp16 compute {fp16}");
        }
    }
}
