/// How requests reach Fleet Engine. Both travel on the same HTTP/2 connections and end in the
/// same outcomes.
public enum FleetEngineProtocol: String, Sendable, CaseIterable {
    /// JSON over HTTP (`PUT`/`PATCH`/`GET` on `/v1/providers/…`): HTTP/2, or HTTP/1.1 where
    /// HTTP/2 is not offered.
    case rest
    /// gRPC's unary protocol (`maps.fleetengine.v1.VehicleService`,
    /// `maps.fleetengine.delivery.v1.DeliveryService`), as Google's own clients speak it: needs HTTP/2.
    case grpc
}
