/// The input formats shipped with the binary (`--input-format`), each a mapping that
/// `fleet-relay mapping show NAME` prints as a starting point for one's own.
public enum BuiltInFormat: String, CaseIterable, Sendable {
    case native
    case traccar
    case owntracks
    case geojson
    case debezium

    /// The mapping's text (YAML).
    public var mappingText: String {
        switch self {
        case .native: Self.nativeText
        case .traccar: Self.traccarText
        case .owntracks: Self.owntracksText
        case .geojson: Self.geojsonText
        case .debezium: Self.debeziumText
        }
    }

    /// The compiled mapping. The texts are part of the binary and checked by its tests.
    public var mapping: InputMapping {
        do {
            return try MappingFile.parse(mappingText, name: "built-in format \(rawValue)")
        } catch {
            preconditionFailure("built-in format \(rawValue): \(error)")
        }
    }

    private static let nativeText = """
        # fleet-relay's own event, one JSON object per record (the default format). The relay
        # decodes it with a dedicated decoder; this mapping describes the same rules.
        key_must_match: true        # a record key, when present, must equal vehicle_id
        fields:
          vehicle_id: vehicle_id
          lat: lat
          lng: lng
          recorded_at: recorded_at  # RFC 3339 with offset, or epoch milliseconds (format: auto)
          heading: heading          # degrees clockwise from north, 0 <= h < 360
          speed_mps: speed_mps      # metres per second
          accuracy_m: accuracy_m
          altitude_m: altitude_m
          sensor: sensor            # GPS, NETWORK, PASSIVE, FUSED, ROAD_SNAPPED, CUSTOMER_SUPPLIED
          kind: kind                # vehicle or delivery_vehicle; else --default-kind

        """

    private static let traccarText = """
        # Traccar's Kafka position forwarder (forward.type kafka): the record key is Traccar's
        # device id, the value {"position": {...}, "device": {...}} as Traccar's JSON writes them.
        # Speed is in knots, times are ISO 8601 with offset. Positions Traccar marks invalid
        # (no GPS fix) or outdated (a repeated old fix) are skipped.
        skip:
          - { empty_value: true }
          - { path: position.valid, equals: false }
          - { path: position.outdated, equals: true }
        fields:
          vehicle_id: device.uniqueId          # the device identifier (IMEI) configured in Traccar
          lat: position.latitude
          lng: position.longitude
          recorded_at: { path: position.fixTime, format: rfc3339 }
          heading: { path: position.course, map: { "360": 0 } }
          speed_mps: { path: position.speed, unit: knots }
          accuracy_m: { path: position.accuracy, map: { "0": null } }   # 0 means unknown in Traccar
          altitude_m: position.altitude

        """

    private static let owntracksText = """
        # OwnTracks location messages as the apps publish them ({"_type": "location", ...}),
        # bridged to Kafka from MQTT or HTTP. The vehicle is the message's topic
        # (owntracks/USER/DEVICE, as HTTP mode and most bridges carry it) or else the record key,
        # with "owntracks/" removed and "/" made "-": owntracks/jane/phone is jane-phone.
        # tst is epoch seconds, vel km/h, cog degrees. Other message types are skipped.
        skip:
          - { empty_value: true }
          - { path: _type, not_equals: location }
        fields:
          vehicle_id: { first_of: [ { path: topic }, { key: true } ], strip_prefix: owntracks/, replace: { "/": "-" } }
          lat: lat
          lng: lon
          recorded_at: { path: tst, format: epoch-seconds }
          heading: cog
          speed_mps: { path: vel, unit: km/h }
          accuracy_m: acc
          altitude_m: alt

        """

    private static let geojsonText = """
        # A GeoJSON Feature per record: a Point geometry [longitude, latitude, altitude] and the
        # native event's other fields as properties.
        coordinates: { path: geometry.coordinates, order: "lng,lat" }
        fields:
          vehicle_id: properties.vehicle_id
          recorded_at: properties.recorded_at   # RFC 3339 with offset, or epoch milliseconds
          altitude_m: geometry.coordinates[2]
          heading: properties.heading
          speed_mps: properties.speed_mps
          accuracy_m: properties.accuracy_m
          sensor: properties.sensor
          kind: properties.kind

        """

    private static let debeziumText = """
        # Debezium change events of a table with the native event's columns (vehicle_id, lat,
        # lng, recorded_at, ...), through the JSON converter with or without schemas. The row is
        # the event's "after" for snapshot reads (r), inserts (c) and updates (u); deletes,
        # truncates and the tombstones after deletes are skipped.
        # With schemas (schemas.enable=true, the converter's default) each column's semantic type
        # is read from the schema: a timestamp column's MicroTimestamp (Debezium's default for
        # PostgreSQL timestamp), NanoTimestamp or Timestamp, a timestamptz's ZonedTimestamp,
        # and numeric columns as Decimal (decimal.handling.mode=precise, the default).
        # Without schemas the values must say it alone: set time.precision.mode=connect
        # (timestamps in milliseconds) and decimal.handling.mode=double, or copy this format
        # with `fleet-relay mapping show debezium` and name the unit (format: epoch-micros).
        # Key the topic by vehicle (message.key.columns), so that one vehicle's rows stay in one
        # partition, in order: keyed by row id, a fix read after a newer one counts as stale.
        envelope: [ payload.after, after ]
        connect_schema: true
        skip:
          - { empty_value: true }
          - { path: payload.op, in: [ d, t ] }
          - { path: op, in: [ d, t ] }
        fields:
          vehicle_id: vehicle_id
          lat: lat
          lng: lng
          recorded_at: recorded_at
          heading: heading
          speed_mps: speed_mps
          accuracy_m: accuracy_m
          altitude_m: altitude_m
          sensor: sensor
          kind: kind

        """
}
