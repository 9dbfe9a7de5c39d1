//! `npurt::npy::parse` on arbitrary bytes: `Ok` with data exactly as long as the shape
//! needs (and a round trip through `to_bytes`), or an error; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(a) = npurt::npy::parse(data, "fuzz.npy") else { return };
    let need = runtime::size::bytes("shape", &a.shape, a.dtype).expect("an accepted shape is representable");
    assert_eq!(a.data.len(), need);
    if let Ok(bytes) = npurt::npy::to_bytes(&a) {
        assert_eq!(npurt::npy::parse(&bytes, "again.npy").expect("to_bytes output parses"), a);
    }
});
