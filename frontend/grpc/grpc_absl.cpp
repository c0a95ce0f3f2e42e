/*
 * grpc_absl: the one setting of Abseil, gRPC core's base library, that the frontend makes.
 *
 * Debian builds Abseil without NDEBUG, so every absl::Mutex lock and unlock (gpr_mu_lock,
 * gRPC's combiners and completion queues) also runs Abseil's debug-only deadlock detection: a
 * graph of which mutex was held while another was taken, looked up and updated on every
 * acquisition. Under callgrind that is a third of the frontend's instructions per gRPC call.
 * Release builds of Abseil (as gRPC's own packages ship it) never run it; switching it off with
 * Abseil's public setting gives the frontend the same gRPC core. C++ because the setting is a
 * C++ function whose symbol carries the build's inline namespace.
 */
#include <absl/synchronization/mutex.h>

extern "C" void grpc_absl_release_mode(void)
{
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}
