//! The GPU realization of DSV4 on cudarc (dynamic loading: builds and runs
//! its CPU tests where there is no CUDA).

pub mod nvrtc;
