"""Google's own Python clients for Fleet Engine (google-maps-fleetengine, -delivery) calling a
server's gRPC route: each call's result or error as one JSON line on stdout.

Usage: fleet_engine_clients.py HOST:PORT CA_FILE PROVIDER < tokens.json
tokens.json: {"vehicle": JWT for vehicle "py-1", "delivery": for delivery vehicle "py-d1", "missing": for "py-d1-missing"}
"""
import datetime
import json
import sys

import grpc
from google.api_core import exceptions
from google.maps import fleetengine_delivery_v1 as fd
from google.maps import fleetengine_v1 as fe
from google.maps.fleetengine_delivery_v1.services.delivery_service.transports import DeliveryServiceGrpcTransport
from google.maps.fleetengine_v1.services.vehicle_service.transports import VehicleServiceGrpcTransport
from google.protobuf import field_mask_pb2, timestamp_pb2
from google.rpc import error_details_pb2
from google.type import latlng_pb2

target, ca_file, provider = sys.argv[1:4]
tokens = json.load(sys.stdin)
channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=open(ca_file, "rb").read()))
vehicles = fe.VehicleServiceClient(transport=VehicleServiceGrpcTransport(channel=channel))
deliveries = fd.DeliveryServiceClient(transport=DeliveryServiceGrpcTransport(channel=channel))


def stamp(milliseconds):
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(milliseconds)
    return ts


def call(label, function, **kwargs):
    """Runs one call; prints what came back, or the error's code, message and retry delay."""
    try:
        result = function(**kwargs)
        location = result.last_location
        times = [t for t in (location.supplemental_location_time, location.update_time) if t]
        newest = max(int(t.timestamp() * 1000) for t in times) if times else None
        print(json.dumps({"call": label, "ok": True, "name": result.name, "time": newest}), flush=True)
    except exceptions.GoogleAPICallError as error:
        retry = next((d.retry_delay.ToMilliseconds() for d in error.details if isinstance(d, error_details_pb2.RetryInfo)), None)
        reason = next((d.reason for d in error.details if isinstance(d, error_details_pb2.ErrorInfo)), None)
        print(json.dumps({"call": label, "ok": False, "code": error.grpc_status_code.name, "message": error.message,
                          "retry_ms": retry, "reason": reason}), flush=True)


def auth(token):
    return [("authorization", "Bearer " + token)]


vehicle_name = f"providers/{provider}/vehicles/py-1"
delivery_name = f"providers/{provider}/deliveryVehicles/py-d1"
supplemental = fe.VehicleLocation(
    supplemental_location=latlng_pb2.LatLng(latitude=37.5, longitude=-122.25),
    supplemental_location_time=stamp(1795381200123),
    supplemental_location_sensor=fe.LocationSensor.CUSTOMER_SUPPLIED_LOCATION,
    supplemental_location_accuracy=4.5, heading=90, speed=12.5)
past = fe.VehicleLocation(supplemental_location=latlng_pb2.LatLng(latitude=37.4, longitude=-122.2),
                          supplemental_location_time=stamp(1795381199000),
                          supplemental_location_sensor=fe.LocationSensor.GPS)
# The server was told to answer the first update with a fault (429 with Retry-After: 7).
call("update_throttled", vehicles.update_vehicle, request=fe.UpdateVehicleRequest(
    name=vehicle_name, vehicle=fe.Vehicle(last_location=supplemental),
    update_mask=field_mask_pb2.FieldMask(paths=["last_location"])), metadata=auth(tokens["vehicle"]))
call("update_vehicle", vehicles.update_vehicle, request=fe.UpdateVehicleRequest(
    name=vehicle_name, vehicle=fe.Vehicle(last_location=supplemental, past_locations=[past]),
    update_mask=field_mask_pb2.FieldMask(paths=["last_location", "past_locations"])), metadata=auth(tokens["vehicle"]))
call("get_vehicle", vehicles.get_vehicle, request=fe.GetVehicleRequest(name=vehicle_name), metadata=auth(tokens["vehicle"]))
call("get_with_another_vehicles_token", vehicles.get_vehicle, request=fe.GetVehicleRequest(name=f"providers/{provider}/vehicles/py-1"),
     metadata=auth(tokens["delivery"]))
call("update_output_only", vehicles.update_vehicle, request=fe.UpdateVehicleRequest(
    name=vehicle_name, vehicle=fe.Vehicle(last_location=fe.VehicleLocation(
        supplemental_location=latlng_pb2.LatLng(latitude=1, longitude=1), supplemental_location_time=stamp(1795381300000),
        server_time=stamp(1795381300000))),
    update_mask=field_mask_pb2.FieldMask(paths=["last_location"])), metadata=auth(tokens["vehicle"]))
device = fd.DeliveryVehicleLocation(location=latlng_pb2.LatLng(latitude=-33.5, longitude=151.25), update_time=stamp(1795381200456),
                                    location_sensor=fd.DeliveryVehicleLocationSensor.GPS, latlng_accuracy=3.0, altitude=12.0)
call("update_delivery_vehicle", deliveries.update_delivery_vehicle, request=fd.UpdateDeliveryVehicleRequest(
    delivery_vehicle=fd.DeliveryVehicle(name=delivery_name, last_location=device),
    update_mask=field_mask_pb2.FieldMask(paths=["last_location"])), metadata=auth(tokens["delivery"]))
call("get_delivery_vehicle", deliveries.get_delivery_vehicle, request=fd.GetDeliveryVehicleRequest(name=delivery_name),
     metadata=auth(tokens["delivery"]))
call("get_missing_delivery_vehicle", deliveries.get_delivery_vehicle,
     request=fd.GetDeliveryVehicleRequest(name=f"providers/{provider}/deliveryVehicles/py-d1-missing"),
     metadata=auth(tokens["missing"]))
call("update_unauthenticated", vehicles.update_vehicle, request=fe.UpdateVehicleRequest(
    name=vehicle_name, vehicle=fe.Vehicle(last_location=supplemental),
    update_mask=field_mask_pb2.FieldMask(paths=["last_location"])), metadata=auth("not-a-jwt"))
