//! `npurt::models::safetensors::parse` on arbitrary bytes: `Ok` with every tensor's bytes
//! exactly what its dtype and representable shape need, or an error; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(tensors) = npurt::models::safetensors::parse(data, "fuzz.safetensors") else { return };
    for (name, t) in &tensors {
        let need = runtime::size::bytes(name, t.shape.dims(), t.dtype).expect("an accepted shape is representable");
        assert_eq!(t.bytes.len(), need, "tensor {name}");
    }
});
