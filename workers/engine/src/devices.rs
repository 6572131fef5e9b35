//! Opening the compute device named on the command line (`--device`).

use candle_core::Device;

/// `auto|cpu|cuda|metal` -> the candle device and the name the engine
/// reports. A device that is asked for but cannot start is an error (the
/// caller exits 3 so the agent restarts on the CPU build).
pub fn open(name: &str) -> Result<(Device, String), String> {
    match name {
        "cpu" => Ok((Device::Cpu, "cpu".into())),
        "cuda" => accelerator(cfg!(feature = "cuda"), "cuda", "CUDA device 0", || Device::new_cuda(0), "cuda:0"),
        "metal" => accelerator(cfg!(feature = "metal"), "metal", "Metal device 0", || Device::new_metal(0), "metal"),
        "auto" => {
            if cfg!(feature = "cuda") && candle_core::utils::cuda_is_available() {
                if let Ok(d) = open("cuda") {
                    return Ok(d);
                }
            }
            if cfg!(feature = "metal") && candle_core::utils::metal_is_available() {
                if let Ok(d) = open("metal") {
                    return Ok(d);
                }
            }
            Ok((Device::Cpu, "cpu".into()))
        }
        other => Err(format!("unknown device {other:?} (auto, cpu, cuda or metal)")),
    }
}

fn accelerator(
    built: bool,
    feature: &str,
    what: &str,
    new: impl FnOnce() -> candle_core::Result<Device>,
    name: &str,
) -> Result<(Device, String), String> {
    if !built {
        return Err(format!("this binary was built without the `{feature}` feature"));
    }
    let dev = new().map_err(|e| format!("{what}: {e}"))?;
    // Touch the device so a broken driver fails here, not mid-request.
    candle_core::Tensor::zeros(4, candle_core::DType::F32, &dev).map_err(|e| format!("{what}: {e}"))?;
    Ok((dev, name.into()))
}

/// Which llama executor runs on `device`: `auto` is the engine's own kernels
/// on the CPU and candle on an accelerator; `candle` forces candle (on the
/// CPU too, where it is the reference for the device path); `kernels` forces
/// the CPU kernels.
pub fn llama_backend(choice: &str, device: &Device) -> Result<crate::llama::Backend, String> {
    use crate::llama::Backend;
    match (choice, device.is_cpu()) {
        ("auto", true) | ("kernels", _) => Ok(Backend::Kernels),
        ("auto", false) | ("candle", _) => Ok(Backend::Candle(device.clone())),
        (other, _) => Err(format!("unknown llama backend {other:?} (auto, kernels or candle)")),
    }
}
