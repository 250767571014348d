import FleetEngineProtos
import FleetModel
import JSON
import NIOCore

/// Reads the time of a vehicle's current location from Fleet Engine's vehicle JSON.
public enum LiveLocation {
    /// The newest of `lastLocation.supplementalLocationTime` and `lastLocation.updateTime`,
    /// or nil when the vehicle has no location yet.
    public static func milliseconds(fromVehicleBody body: String) -> Int64? {
        guard let lastLocation = (try? JSONParser.parse(body))?["lastLocation"] else { return nil }
        return ["supplementalLocationTime", "updateTime"]
            .compactMap { lastLocation[$0]?.stringValue.flatMap(RFC3339.parseMilliseconds) }
            .max()
    }

    /// The same from a `Vehicle` or `DeliveryVehicle` message in a gRPC frame; throws when the
    /// frame or the message cannot be read.
    public static func milliseconds(fromVehicleMessage framed: ByteBuffer, kind: VehicleKind) throws -> Int64? {
        guard let bytes = GRPCFrame.message(in: framed) else { throw UnreadableMessage() }
        return switch kind {
        case .vehicle: try Maps_Fleetengine_V1_Vehicle(serializedBytes: bytes).locationMilliseconds
        case .deliveryVehicle: try Maps_Fleetengine_Delivery_V1_DeliveryVehicle(serializedBytes: bytes).locationMilliseconds
        }
    }

    /// Not one whole, uncompressed gRPC message.
    struct UnreadableMessage: Error {}
}
