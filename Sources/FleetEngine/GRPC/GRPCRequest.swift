import Egress
import FleetEngineProtos
import FleetModel
import NIOCore
import SwiftProtobuf

/// The gRPC calls for a location update and a live-location read: method path and the
/// length-prefixed message (gRPC over HTTP/2); the headers every call adds (`headers`) are the
/// same for one client and provider, and made once.
public struct GRPCRequest: Sendable {
    /// `/maps.fleetengine.v1.VehicleService/UpdateVehicle` and the like.
    public let path: String
    /// The message with gRPC's five-byte prefix (not compressed, length big-endian).
    public let framedMessage: ByteBuffer

    /// `UpdateVehicle` or `UpdateDeliveryVehicle` with the fix in `last_location` and older ones in
    /// `past_locations`, under the same mask REST sends.
    public init(update: VehicleLocationUpdate, provider: String, mode: LocationMode) {
        path = switch update.vehicle.kind {
        case .vehicle: "/maps.fleetengine.v1.VehicleService/UpdateVehicle"
        case .deliveryVehicle: "/maps.fleetengine.delivery.v1.DeliveryService/UpdateDeliveryVehicle"
        }
        framedMessage = GRPCUpdateEncoding.framedRequest(name: Self.vehicleName(provider: provider, vehicle: update.vehicle),
                                                         update: update, mode: mode)
    }

    /// `GetVehicle` or `GetDeliveryVehicle`.
    public init(read vehicle: VehicleIdentity, provider: String) {
        let name = Self.vehicleName(provider: provider, vehicle: vehicle)
        switch vehicle.kind {
        case .vehicle:
            var request = Maps_Fleetengine_V1_GetVehicleRequest()
            request.name = name
            framedMessage = Self.frame(request)
            path = "/maps.fleetengine.v1.VehicleService/GetVehicle"
        case .deliveryVehicle:
            var request = Maps_Fleetengine_Delivery_V1_GetDeliveryVehicleRequest()
            request.name = name
            framedMessage = Self.frame(request)
            path = "/maps.fleetengine.delivery.v1.DeliveryService/GetDeliveryVehicle"
        }
    }

    /// `providers/{provider}/vehicles/{id}` or `…/deliveryVehicles/{id}`: a field, not a path, so
    /// nothing is percent-encoded.
    public static func vehicleName(provider: String, vehicle: VehicleIdentity) -> String {
        "providers/\(provider)/\(vehicle.kind == .vehicle ? "vehicles" : "deliveryVehicles")/\(vehicle.id)"
    }

    /// `provider_id=providers%2F<project>`, as Google's Go client sends it, for
    /// `x-goog-request-params`.
    static func routingParameters(provider: String) -> String {
        "provider_id=" + URLText.encodeComponent("providers/" + provider)
    }

    static func frame(_ message: any SwiftProtobuf.Message) -> ByteBuffer {
        // Serializing to bytes cannot fail for messages built here (no required fields in proto3).
        GRPCFrame.framing((try? message.serializedBytes()) ?? [])
    }

    /// The headers gRPC's unary protocol adds to the relay's own (`:method POST`, the path,
    /// `authorization` never indexed): `te`, `grpc-timeout` and the routing parameters. The same
    /// for every call of one client: percent-encoding the provider for each call took 2 % of
    /// the relay's CPU per warm gRPC request.
    public static func headers(timeout: Duration, provider: String) -> [(name: String, value: String)] {
        [("te", "trailers"), ("grpc-timeout", timeoutText(timeout)), ("x-goog-request-params", routingParameters(provider: provider))]
    }

    /// gRPC's `grpc-timeout`: at most eight digits and a unit; milliseconds, or seconds past that.
    public static func timeoutText(_ timeout: Duration) -> String {
        let (seconds, attoseconds) = timeout.components
        let milliseconds = max(1, seconds * 1000 + attoseconds / 1_000_000_000_000_000)
        return milliseconds < 100_000_000 ? "\(milliseconds)m" : "\(min(milliseconds / 1000, 99_999_999))S"
    }
}
