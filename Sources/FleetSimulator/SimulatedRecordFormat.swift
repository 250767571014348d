import FleetEngine
import JSON

/// One simulated fix, in the native event's units.
public struct SimulatedFix: Sendable {
    public let vehicleId: String
    public let latitude: Double
    public let longitude: Double
    public let recordedAtMilliseconds: Int64
    public let heading: Double
    public let speedMetersPerSecond: Double
    public let accuracyMeters: Double
}

/// How the simulator writes a fix: the native event, or a record shaped as the product that
/// `--input-format` of the same name reads emits it.
public enum SimulatedRecordFormat: String, CaseIterable, Sendable {
    case native
    case traccar
    case owntracks
    case geojson
    case debezium

    public func record(of fix: SimulatedFix) -> (key: [UInt8], value: [UInt8]) {
        switch self {
        case .native: (Array(fix.vehicleId.utf8), native(fix))
        case .traccar: (Array(String(Self.deviceNumber(fix.vehicleId)).utf8), traccar(fix))
        case .owntracks: (Array("owntracks/fleet/\(fix.vehicleId)".utf8), owntracks(fix))
        case .geojson: (Array(fix.vehicleId.utf8), geojson(fix))
        case .debezium: (Array("{\"vehicle_id\":\(JSONText.quoted(fix.vehicleId))}".utf8), debezium(fix))
        }
    }

    private func native(_ fix: SimulatedFix) -> [UInt8] {
        var event = JSONObjectWriter()
        Self.addEventFields(fix, withCoordinates: true, to: &event)
        event.add("sensor", "GPS")
        return event.bytes
    }

    /// The native event's fields (a GeoJSON Feature's properties leave out the coordinates).
    private static func addEventFields(_ fix: SimulatedFix, withCoordinates: Bool, to event: inout JSONObjectWriter) {
        event.add("vehicle_id", fix.vehicleId)
        if withCoordinates {
            event.add("lat", fix.latitude)
            event.add("lng", fix.longitude)
        }
        event.add("recorded_at", RFC3339.format(milliseconds: fix.recordedAtMilliseconds))
        event.add("heading", fix.heading)
        event.add("speed_mps", fix.speedMetersPerSecond)
        event.add("accuracy_m", fix.accuracyMeters)
    }

    /// Traccar's Kafka forwarder: position and device, speed in knots, Jackson's ISO 8601 dates.
    private func traccar(_ fix: SimulatedFix) -> [UInt8] {
        let time = String(RFC3339.format(milliseconds: fix.recordedAtMilliseconds).dropLast()) + "+00:00"
        let device = Self.deviceNumber(fix.vehicleId)
        var record = JSONObjectWriter()
        record.addObject("position") { position in
            position.add("deviceId", device)
            position.add("protocol", "osmand")
            position.add("serverTime", time)
            position.add("deviceTime", time)
            position.add("fixTime", time)
            position.add("outdated", false)
            position.add("valid", true)
            position.add("latitude", fix.latitude)
            position.add("longitude", fix.longitude)
            position.add("altitude", 0.0)
            position.add("speed", fix.speedMetersPerSecond * 3600 / 1852)
            position.add("course", fix.heading)
            position.add("accuracy", fix.accuracyMeters)
            position.addObject("attributes") { $0.add("motion", fix.speedMetersPerSecond > 0) }
        }
        record.addObject("device") { entry in
            entry.add("id", device)
            entry.add("name", fix.vehicleId)
            entry.add("uniqueId", fix.vehicleId)
            entry.add("status", "online")
        }
        return record.bytes
    }

    /// OwnTracks location message: epoch seconds, km/h.
    private func owntracks(_ fix: SimulatedFix) -> [UInt8] {
        var message = JSONObjectWriter()
        message.add("_type", "location")
        message.add("tid", String(fix.vehicleId.suffix(2)))
        message.add("lat", fix.latitude)
        message.add("lon", fix.longitude)
        message.add("tst", Int(fix.recordedAtMilliseconds / 1000))
        message.add("vel", Int((fix.speedMetersPerSecond * 3.6).rounded()))
        message.add("cog", Int(fix.heading.rounded()) % 360)
        message.add("acc", Int(fix.accuracyMeters.rounded()))
        message.add("topic", "owntracks/fleet/\(fix.vehicleId)")
        return message.bytes
    }

    private func geojson(_ fix: SimulatedFix) -> [UInt8] {
        var feature = JSONObjectWriter()
        feature.add("type", "Feature")
        feature.addRaw("geometry", "{\"type\":\"Point\",\"coordinates\":[\(JSONText.number(fix.longitude)),\(JSONText.number(fix.latitude))]}")
        feature.addObject("properties") { Self.addEventFields(fix, withCoordinates: false, to: &$0) }
        return feature.bytes
    }

    /// A Debezium insert through the JSON converter without schemas.
    private func debezium(_ fix: SimulatedFix) -> [UInt8] {
        var change = JSONObjectWriter()
        change.addRaw("before", "null")
        change.addObject("after") { Self.addEventFields(fix, withCoordinates: true, to: &$0) }
        change.addObject("source") { $0.add("connector", "postgresql") }
        change.add("op", "c")
        change.add("ts_ms", Int(fix.recordedAtMilliseconds))
        return change.bytes
    }

    /// A stable number per vehicle, as Traccar's device ids are: the id's digits, else an FNV-1a hash.
    private static func deviceNumber(_ vehicleId: String) -> Int {
        if let number = Int(vehicleId.filter(\.isNumber)) { return number }
        let hash = vehicleId.utf8.reduce(UInt64(14_695_981_039_346_656_037)) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 }
        return Int(hash % 1_000_000)
    }
}
