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
        guard let message = GRPCAnswer.unframed(framed) else { throw UnreadableMessage() }
        let bytes = Array(message.readableBytesView)
        switch kind {
        case .vehicle:
            let vehicle = try Maps_Fleetengine_V1_Vehicle(serializedBytes: bytes)
            return vehicle.hasLastLocation ? vehicle.lastLocation.newestTimeMilliseconds : nil
        case .deliveryVehicle:
            let vehicle = try Maps_Fleetengine_Delivery_V1_DeliveryVehicle(serializedBytes: bytes)
            return vehicle.hasLastLocation ? vehicle.lastLocation.newestTimeMilliseconds : nil
        }
    }

    /// Not one whole, uncompressed gRPC message.
    struct UnreadableMessage: Error {}
}
